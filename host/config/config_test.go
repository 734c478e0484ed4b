package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) Env { return func(k string) string { return m[k] } }

func TestLoadFillsDefaultsWithNoFile(t *testing.T) {
	root := t.TempDir()
	c, err := Load(root, "", env(map[string]string{"MESH_HOST_NODE": "n1"}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Root != root || c.Node != "n1" || c.Prefix != "mesh" || c.ReconcileInterval.Std() != 10*time.Minute || c.HeartbeatInterval.Std() != 30*time.Second || len(c.NATSURLs) != 0 {
		t.Errorf("defaults: %+v", c)
	}
}

func TestLoadEnvironmentWinsOverFile(t *testing.T) {
	root := t.TempDir()
	file := `{"node": "from-file", "nats_urls": ["nats://127.0.0.1:1"], "prefix": "p", "trusted_keys": ["a"], "reconcile_interval": "5m", "heartbeat_interval": "10s"}`
	if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := Load(root, "", env(map[string]string{
		"MESH_HOST_NODE": "from-env", "MESH_HOST_NATS_URL": "nats://127.0.0.1:2, nats://127.0.0.1:3",
		"MESH_HOST_RECONCILE_INTERVAL": "1s",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node != "from-env" || strings.Join(c.NATSURLs, ",") != "nats://127.0.0.1:2,nats://127.0.0.1:3" || c.ReconcileInterval.Std() != time.Second {
		t.Errorf("environment did not win: %+v", c)
	}
	if c.Prefix != "p" || c.HeartbeatInterval.Std() != 10*time.Second || len(c.TrustedKeys) != 1 {
		t.Errorf("file values lost: %+v", c)
	}
}

func TestLoadRootFromEnvironment(t *testing.T) {
	root := t.TempDir()
	c, err := Load("", "", env(map[string]string{"MESH_HOST_ROOT": root, "MESH_HOST_NODE": "n"}))
	if err != nil || c.Root != root {
		t.Fatalf("root %q, %v; want %q", c.Root, err, root)
	}
}

func TestLoadRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"unknown field by name", `{"node": "n", "colour": "blue"}`, nil, `colour: unknown field`},
		{"duration not a string", `{"reconcile_interval": 5}`, nil, "duration"},
		{"duration unparsable", `{"heartbeat_interval": "soon"}`, nil, `"soon"`},
		{"duration not positive", `{"heartbeat_interval": "-1s"}`, nil, "positive"},
		{"bad duration in the environment", `{}`, map[string]string{"MESH_HOST_HEARTBEAT_INTERVAL": "x"}, "MESH_HOST_HEARTBEAT_INTERVAL"},
		{"not JSON", `node = "n"`, nil, "host.json"},
		{"declaration limit negative", `{"max_declaration_bytes": -1}`, nil, "max_declaration_bytes"},
		{"declaration limit not a number", `{"max_declaration_bytes": "1MiB"}`, nil, "max_declaration_bytes"},
		{"declaration limit in the environment not a number", `{}`, map[string]string{"MESH_HOST_MAX_DECLARATION_BYTES": "1MiB"}, "MESH_HOST_MAX_DECLARATION_BYTES"},
		{"declaration limit in the environment zero", `{}`, map[string]string{"MESH_HOST_MAX_DECLARATION_BYTES": "0"}, "MESH_HOST_MAX_DECLARATION_BYTES"},
		{"a key in another case", `{"node": "n", "Prefix": "p"}`, nil, `"Prefix" is not a field (did you mean "prefix"?)`},
		{"a key twice", `{"node": "n", "prefix": "a", "prefix": "b"}`, nil, `duplicate key "prefix"`},
		{"trailing data", `{"node": "n"} {"node": "m"}`, nil, "trailing data"},
		{"insecure_plaintext not a boolean", `{"insecure_plaintext": "yes"}`, nil, "insecure_plaintext"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := Load(root, "", env(tc.env))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v does not name %s", err, tc.want)
			}
		})
	}
}

func TestLoadRefusesMissingNamedConfigButNotMissingDefault(t *testing.T) {
	root := t.TempDir()
	if _, err := Load(root, filepath.Join(root, "nope.json"), env(nil)); err == nil {
		t.Error("a --config file that does not exist was accepted")
	}
	if _, err := Load(root, "", env(map[string]string{"MESH_HOST_NODE": "n"})); err != nil {
		t.Errorf("no host.json at all must be fine: %v", err)
	}
}

func TestLoadDefaultsNodeToShortHostname(t *testing.T) {
	c, err := Load(t.TempDir(), "", env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Node == "" || strings.Contains(c.Node, ".") {
		t.Errorf("node %q: want the short hostname", c.Node)
	}
}

func TestLoadDeclarationLimitDefaultsToOneMiBAndIsConfigurable(t *testing.T) {
	root := t.TempDir()
	c, err := Load(root, "", env(map[string]string{"MESH_HOST_NODE": "n"}))
	if err != nil || c.MaxDeclarationBytes != 1<<20 {
		t.Fatalf("default %d, %v; want 1 MiB", c.MaxDeclarationBytes, err)
	}
	if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(`{"max_declaration_bytes": 2000000}`), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err = Load(root, "", env(map[string]string{"MESH_HOST_NODE": "n"}))
	if err != nil || c.MaxDeclarationBytes != 2_000_000 {
		t.Fatalf("from host.json %d, %v", c.MaxDeclarationBytes, err)
	}
	c, err = Load(root, "", env(map[string]string{"MESH_HOST_NODE": "n", "MESH_HOST_MAX_DECLARATION_BYTES": "4096"}))
	if err != nil || c.MaxDeclarationBytes != 4096 {
		t.Fatalf("from the environment %d, %v", c.MaxDeclarationBytes, err)
	}
}

func TestLoadTrustAndPlaintextSettings(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		wantTarget []string
		wantPlain  bool
	}{
		{"target keys default to the release keys", `{"trusted_keys": ["r1", "r2"]}`, nil, []string{"r1", "r2"}, false},
		{"target keys from host.json win over the release keys", `{"trusted_keys": ["r1"], "trusted_target_keys": ["t1"]}`, nil, []string{"t1"}, false},
		{"target keys from the environment win over host.json", `{"trusted_keys": ["r1"], "trusted_target_keys": ["t1"]}`,
			map[string]string{"MESH_HOST_TRUSTED_TARGET_KEYS": "t2, t3"}, []string{"t2", "t3"}, false},
		{"no keys at all", `{}`, nil, nil, false},
		{"plaintext allowed in host.json", `{"insecure_plaintext": true}`, nil, nil, true},
		{"plaintext allowed by the environment as 1", `{}`, map[string]string{"MESH_HOST_INSECURE_PLAINTEXT": "1"}, nil, true},
		{"plaintext allowed by the environment as true", `{}`, map[string]string{"MESH_HOST_INSECURE_PLAINTEXT": "true"}, nil, true},
		{"plaintext forbidden by the environment over host.json", `{"insecure_plaintext": true}`, map[string]string{"MESH_HOST_INSECURE_PLAINTEXT": "0"}, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			e := map[string]string{"MESH_HOST_NODE": "n"}
			for k, v := range tc.env {
				e[k] = v
			}
			c, err := Load(root, "", env(e))
			if err != nil {
				t.Fatal(err)
			}
			if got := c.TargetKeys(); strings.Join(got, ",") != strings.Join(tc.wantTarget, ",") {
				t.Errorf("target keys %q, want %q", got, tc.wantTarget)
			}
			if c.InsecurePlaintext != tc.wantPlain {
				t.Errorf("insecure_plaintext %v, want %v", c.InsecurePlaintext, tc.wantPlain)
			}
		})
	}
}

func TestLoadRefusesAnUnreadablePlaintextSetting(t *testing.T) {
	_, err := Load(t.TempDir(), "", env(map[string]string{"MESH_HOST_NODE": "n", "MESH_HOST_INSECURE_PLAINTEXT": "yes please"}))
	if err == nil || !strings.Contains(err.Error(), "MESH_HOST_INSECURE_PLAINTEXT") {
		t.Fatalf("err = %v, want it to name MESH_HOST_INSECURE_PLAINTEXT", err)
	}
}

func TestLoadJetStreamAPIPrefix(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		want       string
	}{
		{"none: the plain $JS.API", `{}`, nil, ""},
		{"from host.json (what enrol writes)", `{"js_api_prefix": "$JS.mesh.API"}`, nil, "$JS.mesh.API"},
		{"the environment wins", `{"js_api_prefix": "$JS.mesh.API"}`, map[string]string{"MESH_HOST_JS_API_PREFIX": "$JS.other.API"}, "$JS.other.API"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			e := map[string]string{"MESH_HOST_NODE": "n"}
			for k, v := range tc.env {
				e[k] = v
			}
			c, err := Load(root, "", env(e))
			if err != nil || c.JSAPIPrefix != tc.want {
				t.Fatalf("js_api_prefix %q, %v; want %q", c.JSAPIPrefix, err, tc.want)
			}
		})
	}
}

// max_fetch_rate and link_class come from host.json, the environment winning; a rate under
// 1 KiB/s, a rate that is not a number, and a link class nobody knows are refused, named.
func TestLoadFetchRateAndLinkClass(t *testing.T) {
	for _, tc := range []struct {
		name, file string
		env        map[string]string
		rate       int64
		class      string
		err        string
	}{
		{"neither: no cap, unmetered", `{}`, nil, 0, "", ""},
		{"from host.json", `{"max_fetch_rate": 200000, "link_class": "metered"}`, nil, 200_000, "metered", ""},
		{"the environment wins", `{"max_fetch_rate": 200000, "link_class": "metered"}`,
			map[string]string{"MESH_HOST_MAX_FETCH_RATE": "50000", "MESH_HOST_LINK_CLASS": "unmetered"}, 50_000, "unmetered", ""},
		{"0 in the environment lifts the cap", `{"max_fetch_rate": 200000}`, map[string]string{"MESH_HOST_MAX_FETCH_RATE": "0"}, 0, "", ""},
		{"a rate under 1 KiB/s", `{"max_fetch_rate": 100}`, nil, 0, "", "max_fetch_rate is 100 bytes per second; give at least 1024"},
		{"a negative rate", `{"max_fetch_rate": -5}`, nil, 0, "", "max_fetch_rate is -5"},
		{"a rate that is not a number", `{}`, map[string]string{"MESH_HOST_MAX_FETCH_RATE": "fast"}, 0, "", `MESH_HOST_MAX_FETCH_RATE: "fast" is not a number`},
		{"a class nobody knows", `{"link_class": "satellite"}`, nil, 0, "", `link_class "satellite" is not "unmetered" or "metered"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			if err := os.WriteFile(filepath.Join(root, "host.json"), []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			e := map[string]string{"MESH_HOST_NODE": "n"}
			for k, v := range tc.env {
				e[k] = v
			}
			c, err := Load(root, "", env(e))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want one saying %q", err, tc.err)
				}
				return
			}
			if err != nil || c.MaxFetchRate != tc.rate || c.LinkClass != tc.class {
				t.Fatalf("rate %d class %q (%v), want %d %q", c.MaxFetchRate, c.LinkClass, err, tc.rate, tc.class)
			}
		})
	}
}

func TestSetNATSURLsRewritesThemAndKeepsEveryOtherField(t *testing.T) {
	root := t.TempDir()
	path := filepath.Join(root, "host.json")
	before := `{"node": "n1", "nats_urls": ["tls://old:4222"], "nats_ca": "/r/ca.pem", "trusted_keys": ["a"], "heartbeat_interval": "10s", "link_class": "metered"}`
	if err := os.WriteFile(path, []byte(before), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := SetNATSURLs(path, []string{"tls://new-1:4222", "tls://new-2:4222"}); err != nil {
		t.Fatal(err)
	}
	c, err := Load(root, "", func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(c.NATSURLs, ",") != "tls://new-1:4222,tls://new-2:4222" || c.Node != "n1" || c.NATSCA != "/r/ca.pem" ||
		strings.Join(c.TrustedKeys, ",") != "a" || c.HeartbeatInterval.Std() != 10*time.Second || c.LinkClass != "metered" || c.File != path {
		t.Fatalf("after: %+v", c)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o640 {
		t.Fatalf("mode %v, want the file's own 0640", st.Mode().Perm())
	}
	if err := os.WriteFile(path, []byte(`[1]`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := SetNATSURLs(path, []string{"tls://x:1"}); err == nil || !strings.Contains(err.Error(), "not a JSON object") {
		t.Fatalf("a host.json that is not an object: %v", err)
	}
}
