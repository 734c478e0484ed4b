package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A window that is wrong in any part is refused before the bus is dialled, naming the part.
func TestWindowSetRefusesWhatIsWrongNamingIt(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no subcommand", []string{"window"}, 2, "want a subcommand: set, show or clear"},
		{"an unknown subcommand", []string{"window", "open"}, 2, `unknown subcommand "open"`},
		{"no window", []string{"window", "set", "--fleet"}, 2, "want (NODE… | --fleet) WINDOW"},
		{"a day that is not one", []string{"window", "set", "--fleet", "mon-fry", "02:00-04:00", "UTC"}, 2, `"mon-fry" is not a day`},
		{"a zone nobody knows", []string{"window", "set", "--fleet", "mon-fri 02:00-04:00 Europe/Bruxelles"}, 2, `zone "Europe/Bruxelles" is not an IANA time zone`},
		{"an end that is not a time", []string{"window", "set", "web-01", "mon 02:00-4:00 UTC"}, 2, `end "4:00" is not a time of day`},
		{"nodes and the fleet", []string{"window", "set", "--fleet", "web-01", "mon 02:00-04:00 UTC"}, 2, "give node ids or --fleet, not both"},
		{"neither", []string{"window", "set", "mon 02:00-04:00 UTC"}, 2, "no node ids given"},
		{"a validity out of bounds", []string{"window", "set", "--fleet", "--ttl", "1s", "mon 02:00-04:00 UTC"}, 2, "--ttl 1s: want between"},
		{"no key", []string{"window", "set", "--fleet", "mon 02:00-04:00 UTC"}, 2, "--key FILE is required"},
		{"clear with neither", []string{"window", "clear"}, 2, "no node ids given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, tc.args...)
			if code != tc.code || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errOut, tc.code, tc.want)
			}
		})
	}
}

// set writes a window each node's key holds, signed by --key for that key; show lists them and
// says which one each node keeps; clear removes them.
func TestWindowSetShowClearOnABus(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	n := wire.NamesFor("")
	heartbeat(t, c, "web-01")
	heartbeat(t, c, "web-02")
	env := map[string]string{envNATSURL: url}
	key := keyFile(t)

	code, out, errOut := runMain(t, env, "window", "set", "--key", key, "web-01", "web-02", "mon-fri", "02:00-04:00", "Europe/Brussels")
	if code != 0 || !strings.HasPrefix(out, "window mon-fri 02:00-04:00 Europe/Brussels set for web-01 (revision ") ||
		!strings.Contains(out, "web-02 (revision ") || !strings.Contains(out, "signed by key "+wire.KeyID(meshtest.ReleaseKey.Public)) {
		t.Fatalf("set: exit %d, %q, %q", code, out, errOut)
	}
	kv, err := c.JS.KeyValue(ctx, n.Targets())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, wire.NodeWindowKey("web-02"))
	if err != nil {
		t.Fatal(err)
	}
	w, err := wire.ParseWindow(e.Value())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Verify(wire.NodeWindowKey("web-02"), wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, out, errOut := runMain(t, env, "window", "set", "--key", key, "web-09", "daily 22:00-23:00 UTC"); code != 1 || !strings.Contains(errOut, `node "web-09" has never heartbeated`) {
		t.Fatalf("set for a node never heard: exit %d, %q, %q", code, out, errOut)
	}
	if code, out, errOut := runMain(t, env, "window", "set", "--key", key, "--fleet", "daily 22:00-23:00 UTC"); code != 0 || !strings.Contains(out, "set for the fleet") {
		t.Fatalf("set --fleet: exit %d, %q, %q", code, out, errOut)
	}

	code, out, errOut = runMain(t, env, "window", "show", "--json", "web-01", "web-03")
	if code != 0 {
		t.Fatalf("show: exit %d, %q, %q", code, out, errOut)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 {
		t.Fatalf("show --json for two nodes: %q", out)
	}
	var rows [2]shownWindowJSON
	for i, l := range lines {
		if err := json.Unmarshal([]byte(l), &rows[i]); err != nil {
			t.Fatal(err)
		}
	}
	if rows[0].Key != wire.NodeWindowKey("web-01") || rows[0].Window != "mon-fri 02:00-04:00 Europe/Brussels" || rows[0].Opens.IsZero() {
		t.Errorf("web-01 keeps %+v, want its own window", rows[0])
	}
	if rows[1].Key != wire.FleetWindowKey || rows[1].Window != "daily 22:00-23:00 UTC" {
		t.Errorf("web-03 keeps %+v, want the fleet's", rows[1])
	}
	code, out, _ = runMain(t, env, "window", "show")
	if code != 0 || !strings.Contains(out, "window.node.web-01") || !strings.Contains(out, "web-01,web-02") || !strings.Contains(out, "window.fleet") {
		t.Errorf("show: exit %d, %q", code, out)
	}

	code, out, errOut = runMain(t, env, "window", "clear", "web-01", "web-03")
	if code != 0 || !strings.Contains(out, "window cleared for web-01 (was mon-fri 02:00-04:00 Europe/Brussels") || !strings.Contains(out, "no window to clear for web-03") {
		t.Fatalf("clear: exit %d, %q, %q", code, out, errOut)
	}
	if _, err := kv.Get(ctx, wire.NodeWindowKey("web-01")); err == nil {
		t.Error("web-01's window is still there after clear")
	}
}

// An urgent target says so, and is signed urgent.
func TestTargetUrgentSignsTheTargetUrgent(t *testing.T) {
	url, c := startServeConnected(t)
	ctx := context.Background()
	announce(t, c, "v1.1.0")
	heartbeat(t, c, "web-01")
	code, out, errOut := runMain(t, map[string]string{envNATSURL: url}, "target", "--key", keyFile(t), "--urgent", "web-01", "v1.1.0")
	if code != 0 || !strings.Contains(out, "urgent: nodes do not wait for their maintenance windows") {
		t.Fatalf("exit %d, %q, %q", code, out, errOut)
	}
	kv, err := c.JS.KeyValue(ctx, wire.NamesFor("").Targets())
	if err != nil {
		t.Fatal(err)
	}
	e, err := kv.Get(ctx, wire.NodeTargetKey("web-01"))
	if err != nil {
		t.Fatal(err)
	}
	tg, err := wire.ParseTarget(e.Value())
	if err != nil || !tg.Urgent {
		t.Fatalf("target %+v (%v): want urgent", tg, err)
	}
	if err := tg.Verify(wire.NodeTargetKey("web-01"), wire.LegacyTrust(nil, []ed25519.PublicKey{meshtest.ReleaseKey.Public}), time.Now()); err != nil {
		t.Fatal(err)
	}
}
