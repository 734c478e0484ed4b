package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// init --server-config writes each server's configuration from the trust store in --data (made
// there when missing) and says how to start each and what to export; it connects to nothing.
func TestInitServerConfigWritesEachServerAndSaysHowToStartIt(t *testing.T) {
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, "init", "--server-config", dir, "--data", data,
		"--server", "s1=127.0.0.1:14222,127.0.0.1:16222", "--server", "s2=127.0.0.1:14223,127.0.0.1:16223", "--server", "s3=127.0.0.1:14224,127.0.0.1:16224")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, name := range []string{"s1", "s2", "s3"} {
		conf := filepath.Join(dir, name, "nats-server.conf")
		if _, err := os.Stat(conf); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if !strings.Contains(out, "server "+name+": nats-server -c "+conf) {
			t.Errorf("it does not say how to start %s:\n%s", name, out)
		}
	}
	for _, want := range []string{
		"export MESH_NATS_URL=tls://127.0.0.1:14222,tls://127.0.0.1:14223,tls://127.0.0.1:14224",
		"export MESH_NATS_CREDS=" + filepath.Join(data, "trust", "admin.creds"),
		"export MESH_NATS_CA=" + filepath.Join(data, "tls", "ca.pem"),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("it does not say %q:\n%s", want, out)
		}
	}
}

func TestInitRefusesClusterFlagsThatDoNotGoTogether(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"a server without --server-config", []string{"--server", "s1=127.0.0.1:14222,127.0.0.1:16222"}, "go with --server-config"},
		{"--server-config without servers", []string{"--server-config", "DIR"}, "needs each server"},
		{"a server badly written", []string{"--server-config", "DIR", "--server", "s1=127.0.0.1:14222"}, "NAME=HOST:PORT,ROUTE_HOST:ROUTE_PORT"},
		{"replicas out of range", []string{"--replicas", "7"}, "1 to 5 servers"},
		{"replicas with --server-config", []string{"--server-config", "DIR", "--replicas", "3", "--server", "s1=127.0.0.1:14222,127.0.0.1:16222"}, "not with --server-config"},
		{"a leaf without --server-config", []string{"--leaf", "site1=127.0.0.1:15222"}, "go with --server-config"},
		{"a hub without a leaf", []string{"--server-config", "DIR", "--hub", "tls://127.0.0.1:17422", "--server", "s1=127.0.0.1:14222,127.0.0.1:16222"}, "--hub is where a --leaf connects"},
		{"a leaf badly written", []string{"--server-config", "DIR", "--leaf", "127.0.0.1:15222"}, "NAME=HOST:PORT"},
		{"a hub URL that is not TLS", []string{"--server-config", "DIR", "--leaf", "site1=127.0.0.1:15222", "--hub", "nats://127.0.0.1:17422"}, "tls://HOST:PORT"},
		{"a leaf with nowhere to connect", []string{"--server-config", "DIR", "--leaf", "site1=127.0.0.1:15222", "--server", "s1=127.0.0.1:14222,127.0.0.1:16222"}, "needs the hub's leaf URLs"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for i, a := range tc.args {
				if a == "DIR" {
					tc.args[i] = t.TempDir()
				}
			}
			code, _, errOut := runMain(t, nil, append([]string{"init"}, tc.args...)...)
			if code != 2 || !strings.Contains(errOut, tc.want) {
				t.Fatalf("exit %d, %q; want 2 and %q", code, errOut, tc.want)
			}
		})
	}
}

// init --server-config --leaf writes a site's leaf server beside the cluster's, connected to the
// servers' leaf addresses, and says how to start it and which URL its nodes' tokens name.
func TestInitServerConfigWritesALeafAndSaysWhatItsNodesDial(t *testing.T) {
	dir, data := t.TempDir(), filepath.Join(t.TempDir(), "data")
	code, out, errOut := runMain(t, nil, "init", "--server-config", dir, "--data", data,
		"--server", "s1=127.0.0.1:14222,127.0.0.1:16222,127.0.0.1:17422", "--leaf", "site1=127.0.0.1:15222")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	conf := filepath.Join(dir, "site1", "nats-server.conf")
	if want := "leaf site1: nats-server -c " + conf + "   # its nodes: mesh-release enrol-token --url tls://127.0.0.1:15222"; !strings.Contains(out, want) {
		t.Errorf("it does not say %q:\n%s", want, out)
	}
	text, err := os.ReadFile(conf)
	if err != nil || !strings.Contains(string(text), `urls: ["tls://127.0.0.1:17422"]`) {
		t.Errorf("the leaf does not connect to s1's leaf address (%v):\n%s", err, text)
	}
}
