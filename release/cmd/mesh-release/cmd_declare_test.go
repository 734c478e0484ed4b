package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The reproductions: `declare` accepted a service named mesh-launcher.service and a file
// at /var/lib/mesh-host/versions/v9.9.9/mesh-host. It refuses each by name, saying which
// resource, and a bad spec anywhere with its place; nothing is sent (no server is running).
func TestDeclareRefusesWhatTheInstallationOwnsAndBadSpecsByPlace(t *testing.T) {
	const sha = "sha256:3f4d8c1b2a0e9f7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6b5a4938271605f"
	for _, tc := range []struct{ name, resources, want string }{
		{"LauncherService", `{"type":"directory","id":"/srv/app"},{"type":"service","id":"mesh-launcher.service","spec":{"state":"stopped"}}`,
			`resources[1].id: unit "mesh-launcher.service" is the launcher's own unit: the package owns it, never a declaration`},
		{"LauncherServiceWithoutSuffix", `{"type":"service","id":"x","spec":{"unit":"mesh-launcher"}}`,
			`resources[0].spec.unit: unit "mesh-launcher" is the launcher's own unit`},
		{"FileInVersions", `{"type":"directory","id":"/srv/app"},{"type":"directory","id":"/srv/b"},{"type":"file","id":"/var/lib/mesh-host/versions/v9.9.9/mesh-host","spec":{"source":"` + sha + `","mode":"0755"}}`,
			`resources[2].id: path "/var/lib/mesh-host/versions/v9.9.9/mesh-host" is inside /var/lib/mesh-host, which the installation owns, not the host`},
		{"FileInVersionsByAnotherSpelling", `{"type":"file","id":"app","spec":{"path":"/var/lib/mesh-host/../mesh-host/versions/v9.9.9/mesh-host","content":""}}`,
			`resources[0].spec.path: path "/var/lib/mesh-host/../mesh-host/versions/v9.9.9/mesh-host" is inside /var/lib/mesh-host`},
		{"UnknownSpecField", `{"type":"directory","id":"/srv/app","spec":{"mode":"0755","recurse":true}}`,
			`resources[0].spec.recurse: unknown field`},
		{"BadMode", `{"type":"directory","id":"/srv/app"},{"type":"directory","id":"/srv/b"},{"type":"directory","id":"/srv/app/x","spec":{"mode":"0999"}}`,
			`resources[2].spec.mode: "0999" is not an octal mode like "0644"`},
		{"TagOnlyImage", `{"type":"container","id":"web","spec":{"image":"nginx:latest"}}`,
			`resources[0].spec.image: image "nginx:latest" must be pinned by digest`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "n1.json")
			if err := os.WriteFile(file, []byte(`{"version":1,"node":"n1","resources":[`+tc.resources+`]}`), 0o600); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := execCmd(context.Background(), "declare", nil, &out, "--nats", "nats://127.0.0.1:1", "n1", file)
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "(nothing was put)") || !strings.HasPrefix(err.Error(), file+": declaration: ") {
				t.Fatalf("err = %v\nwant it to start with the file, contain\n  %s\nand say nothing was put", err, tc.want)
			}
			if out.Len() != 0 {
				t.Fatalf("printed %q", out.String())
			}
		})
	}
}
