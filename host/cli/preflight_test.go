package cli

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/rollback"
)

// A staged version runs preflight against this node's settings before the host stands aside for
// it: settings it would refuse at run must fail preflight, so the version is refused at staging
// rather than started and rolled back.
func TestPreflightRefusesSettingsTheHostWouldRefuseAtRun(t *testing.T) {
	for _, tc := range []struct {
		name, hostJSON, want string
	}{
		{"a loopback plaintext bus", `{"node":"n1","nats_urls":["nats://127.0.0.1:4222"]}`, ""},
		{"a TLS bus elsewhere", `{"node":"n1","nats_urls":["tls://bus.example:4222"]}`, ""},
		{"plaintext to another machine", `{"node":"n1","nats_urls":["nats://bus.example:4222"]}`, "refuses the plaintext bus URL nats://bus.example:4222"},
		{"plaintext allowed by name", `{"node":"n1","nats_urls":["nats://bus.example:4222"],"insecure_plaintext":true}`, ""},
		{"a target key that is not one", `{"node":"n1","trusted_target_keys":["not-a-key"]}`, "preflight: trusted_target_keys:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			r, _, err := rollback.OpenForLauncher(context.Background(), root) // the launcher makes records.db
			if err != nil {
				t.Fatal(err)
			}
			r.Close()
			if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(tc.hostJSON), 0o600); err != nil {
				t.Fatal(err)
			}
			t.Setenv("MESH_HOST_ROOT", "")
			var out, errOut bytes.Buffer
			code := command("v1.2.3", []string{"preflight", "--root", root}, &out, &errOut)
			if tc.want == "" && code != 0 {
				t.Fatalf("exit %d: %s", code, errOut.String())
			}
			if tc.want != "" && (code != 1 || !strings.Contains(errOut.String(), tc.want)) {
				t.Fatalf("exit %d, stderr %q; want exit 1 saying %q", code, errOut.String(), tc.want)
			}
			if !strings.HasPrefix(out.String(), "v1.2.3\n") {
				t.Fatalf("preflight did not print its version first: %q", out.String())
			}
		})
	}
}
