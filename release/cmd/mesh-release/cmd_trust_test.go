package main

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/trustroot"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// ceremony is a release key and trust init's output in a temporary directory.
type ceremony struct {
	dir, rel, roots string
	relID           string
}

func newCeremony(t *testing.T) ceremony {
	t.Helper()
	c := ceremony{dir: t.TempDir()}
	c.rel, c.roots = filepath.Join(c.dir, "rel"), filepath.Join(c.dir, "roots")
	pub, err := build.Keygen(c.rel)
	if err != nil {
		t.Fatal(err)
	}
	c.relID = wire.KeyID(pub)
	mustRun(t, nil, "trust", "init", "--out", c.roots, "--releases-key", filepath.Join(c.rel, "release.pub"), "--sign-with", filepath.Join(c.rel, "release.key"))
	return c
}

func (c ceremony) root(v uint64) string { return filepath.Join(c.roots, trustroot.FileName(v)) }
func (c ceremony) key(n int) string     { return filepath.Join(c.roots, trustroot.KeyFile(n)) }

// mustRun runs a command line that must succeed and returns its stdout.
func mustRun(t *testing.T, env map[string]string, args ...string) string {
	t.Helper()
	code, out, errOut := runMain(t, env, args...)
	if code != 0 {
		t.Fatalf("%s: exit %d\nstdout %s\nstderr %s", strings.Join(args, " "), code, out, errOut)
	}
	return out
}

// Each trust command refuses what would make a root no node takes, or lose one, before writing
// anything: exit 2 for usage, 1 for a refusal, each said in one line naming what is wrong.
func TestTrustCommandsRefuseBadCountsKeysAndFiles(t *testing.T) {
	c := newCeremony(t)
	pub := filepath.Join(c.rel, "release.pub")
	other := filepath.Join(c.dir, "other")
	if _, err := build.Keygen(other); err != nil {
		t.Fatal(err)
	}
	mustRun(t, nil, "trust", "rotate", "--from", c.root(1), "--role", "releases", "--add", filepath.Join(other, "release.pub"))
	mustRun(t, nil, "trust", "sign", c.root(2), "--key", c.key(1))
	fresh := filepath.Join(c.dir, "fresh")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a threshold above the keys", []string{"init", "--out", fresh, "--releases-key", pub, "--root-keys", "3", "--threshold", "4"}, 2, "--threshold 4: it must be between 1 and --root-keys (3)"},
		{"no root keys", []string{"init", "--out", fresh, "--releases-key", pub, "--root-keys", "0", "--threshold", "0"}, 2, "--root-keys 0: make 1 to 32 root keys"},
		{"a threshold of 0", []string{"init", "--out", fresh, "--releases-key", pub, "--threshold", "0"}, 2, "--threshold 0: it must be between 1 and --root-keys (3)"},
		{"no releases key", []string{"init", "--out", fresh}, 2, "--releases-key FILE is required"},
		{"no --out", []string{"init", "--releases-key", pub}, 2, "--out DIR is required"},
		{"existing files", []string{"init", "--out", c.roots, "--releases-key", pub}, 1, "root.1.json already exists; move it aside, or give --force"},
		{"sign without a key", []string{"sign", c.root(2)}, 2, "--key FILE is required"},
		{"sign twice with one key", []string{"sign", c.root(2), "--key", c.key(1)}, 1, "has signed it already"},
		{"sign with a key in no role", []string{"sign", c.root(2), "--key", filepath.Join(other, "release.key")}, 1, "is not among root v1's or root v2's root keys: its signature would count for nothing"},
		{"sign no file", []string{"sign", "--key", c.key(1)}, 2, "want FILE, the document to sign, got 0 arguments"},
		{"remove the last key", []string{"rotate", "--from", c.root(1), "--role", "releases", "--remove", c.relID}, 1, "removes the last key of releases"},
		{"a threshold above the keys left", []string{"rotate", "--from", c.root(1), "--role", "root", "--threshold", "4"}, 1, "a threshold of 4 for root, which would hold 3 keys"},
		{"an unknown key id", []string{"rotate", "--from", c.root(1), "--role", "releases", "--remove", "0123456789abcdef", "--out", filepath.Join(c.dir, "x.json")}, 1, "--remove 0123456789abcdef: is no key of releases in root v1"},
		{"an unknown role", []string{"rotate", "--from", c.root(1), "--role", "admins", "--threshold", "1"}, 2, `--role "admins": want root, releases or targets`},
		{"an existing next file", []string{"rotate", "--from", c.root(1)}, 1, "root.2.json already exists"},
		{"publish nothing", []string{"publish"}, 2, "want FILE, the root to publish, got 0 arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := os.ReadFile(c.root(2))
			code, out, errOut := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, append([]string{"trust"}, tc.args...)...)
			if code != tc.code || out != "" || !strings.Contains(errOut, tc.want) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, out, errOut, tc.code, tc.want)
			}
			if after, _ := os.ReadFile(c.root(2)); string(after) != string(before) {
				t.Errorf("root.2.json changed")
			}
		})
	}
	if _, err := os.Stat(fresh); err == nil {
		t.Errorf("a refused init wrote %s", fresh)
	}
}

// The whole ceremony against a real bus: init, publish v1 (which a node holding only the
// release key takes), rotate the release key out of releases and targets, a root signed by one
// of three refused by publish, signed by two published; going back, a gap and other bytes under
// a published version refused; the same file again a no-op. A node walking the bus's chain then
// refuses a manifest signed by the old key by name.
func TestTrustCeremonyPublishesAVerifiedChainAndRefusesTheRest(t *testing.T) {
	b := meshtest.StartBus(t)
	env := map[string]string{envNATSURL: b.URL()}
	c := newCeremony(t)
	out := mustRun(t, env, "trust", "publish", c.root(1))
	if !strings.HasPrefix(out, "published root v1 (sha256:") || !strings.Contains(out, "as root.1") {
		t.Errorf("publish v1 said %q", out)
	}
	if out := mustRun(t, env, "trust", "publish", c.root(1)); !strings.Contains(out, "with these bytes: nothing to do") {
		t.Errorf("publish v1 again said %q", out)
	}

	newRel := filepath.Join(c.dir, "rel2")
	if _, err := build.Keygen(newRel); err != nil {
		t.Fatal(err)
	}
	out = mustRun(t, env, "trust", "rotate", "--bus", "--role", "releases,targets", "--add", filepath.Join(newRel, "release.pub"), "--remove", c.relID[:8], "--out", c.root(2))
	if !strings.Contains(out, "root v2 from v1 (releases: +") || !strings.Contains(out, "-"+c.relID) {
		t.Errorf("rotate said %q", out)
	}
	out = mustRun(t, env, "trust", "sign", c.root(2), "--key", c.key(2))
	if !strings.Contains(out, "1 of 3 root v1's root keys signed (threshold 2, not met: 1 more)") {
		t.Errorf("sign said %q", out)
	}
	code, _, errOut := runMain(t, env, "trust", "publish", c.root(2))
	if code != 1 || !strings.Contains(errOut, "root v2 refused: by root v1's root keys") {
		t.Errorf("a root signed by 1 of 3: exit %d, %q; want refused", code, errOut)
	}
	out = mustRun(t, env, "trust", "sign", c.root(2), "--key", c.key(3))
	if !strings.Contains(out, "2 of 3 its own root keys signed (threshold 2, met)") || !strings.Contains(out, "every threshold is met") {
		t.Errorf("sign said %q", out)
	}
	mustRun(t, env, "trust", "publish", c.root(2))

	// Going back: another root v1, and v1's file with a signature more.
	other := filepath.Join(c.dir, "other")
	mustRun(t, nil, "trust", "init", "--out", other, "--releases-key", filepath.Join(newRel, "release.pub"))
	r1, err := trustroot.ReadFile(c.root(1))
	if err != nil {
		t.Fatal(err)
	}
	k3, _ := build.LoadKey(c.key(3))
	if err := r1.Sign(k3); err != nil {
		t.Fatal(err)
	}
	resigned := filepath.Join(c.dir, "root.1.resigned.json")
	if err := trustroot.WriteFile(resigned, r1); err != nil {
		t.Fatal(err)
	}
	// A gap: v4 made from a v3 never published.
	mustRun(t, nil, "trust", "rotate", "--from", c.root(2))
	mustRun(t, nil, "trust", "rotate", "--from", c.root(3))
	for _, k := range []int{1, 2} {
		mustRun(t, nil, "trust", "sign", c.root(4), "--key", c.key(k), "--prev", c.root(3))
	}
	for _, tc := range []struct{ name, file, want string }{
		{"another v1", filepath.Join(other, "root.1.json"), "root v1 is on the bus already (root.1 in mesh_host_releases) with other content or signatures"},
		{"v1 with another signature", resigned, "root v1 is on the bus already"},
		{"a gap", c.root(4), "root v4 refused: the newest root on the bus is v2, so the next is v3"},
	} {
		code, _, errOut := runMain(t, env, "trust", "publish", tc.file)
		if code != 1 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %q; want exit 1 and %q", tc.name, code, errOut, tc.want)
		}
	}

	var shown showJSON
	if err := json.Unmarshal([]byte(mustRun(t, env, "trust", "show", "--bus", "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Version != 2 || !shown.Complete || len(shown.OnBus) != 2 || len(shown.Thresholds) != 2 || shown.Roles[wire.RoleReleases].Keys[0] == c.relID {
		t.Errorf("show --bus = %+v", shown)
	}

	// A node that trusted the old release key walks the bus's chain and refuses it by name.
	oldPub, _ := os.ReadFile(filepath.Join(c.rel, "release.pub"))
	pub, err := wire.ParseTrustedKey(strings.TrimSpace(string(oldPub)))
	if err != nil {
		t.Fatal(err)
	}
	roots, err := trustroot.History(meshtest.Context(t, time.Minute), b.KV(b.Names.Releases()))
	if err != nil || len(roots) != 2 {
		t.Fatalf("history: %d roots, %v", len(roots), err)
	}
	tr := wire.LegacyTrust([]ed25519.PublicKey{pub}, []ed25519.PublicKey{pub})
	for _, r := range roots {
		if tr, err = tr.Advance(r); err != nil {
			t.Fatalf("a node holding the release key: %v", err)
		}
	}
	oldKey, _ := build.LoadKey(filepath.Join(c.rel, "release.key"))
	sg, _ := wire.SignText([]byte("manifest"), oldKey)
	err = tr.Verify(wire.Envelope{Kind: wire.KindManifest, Name: "v9.9.9", Role: wire.RoleReleases, Text: []byte("manifest"), Signatures: []wire.Signature{sg}}, time.Now())
	if !errors.Is(err, wire.ErrKeyRemoved) || !strings.Contains(err.Error(), "which root v2 removed from releases") {
		t.Errorf("a manifest signed by the removed key: %v", err)
	}
}

// Anyone able to write the releases bucket can put a root.2 that does not verify (here signed by
// 1 of root v1's 3 root keys) where the real one goes. It must not block the rotation: show --bus
// and rotate --bus name it refused and work on v1, publish of the real root.2 replaces it (and a
// fleet reader then walks to v2), and a root.2 that verifies is never replaced by other bytes.
func TestTrustPublishReplacesARootOnTheBusThatDoesNotVerify(t *testing.T) {
	b := meshtest.StartBus(t)
	env := map[string]string{envNATSURL: b.URL()}
	c := newCeremony(t)
	mustRun(t, env, "trust", "publish", c.root(1))
	mustRun(t, nil, "trust", "rotate", "--from", c.root(1))
	mustRun(t, nil, "trust", "sign", c.root(2), "--key", c.key(1))
	forged, err := os.ReadFile(c.root(2))
	if err != nil {
		t.Fatal(err)
	}
	b.Put(b.Names.Releases(), wire.RootKey(2), forged)
	refused := "root.2 in mesh_host_releases is refused: "

	var shown showJSON
	if err := json.Unmarshal([]byte(mustRun(t, env, "trust", "show", "--bus", "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Version != 1 || !strings.HasPrefix(shown.Refused, refused) {
		t.Errorf("show --bus with a forged root.2: v%d, refused %q", shown.Version, shown.Refused)
	}
	if out := mustRun(t, env, "trust", "show", "--bus"); !strings.Contains(out, "refused      "+refused) {
		t.Errorf("show --bus said %q", out)
	}
	code, out, errOut := runMain(t, env, "trust", "rotate", "--bus", "--out", filepath.Join(c.dir, "elsewhere.json"))
	if code != 0 || !strings.Contains(out, "root v2 from v1") || !strings.Contains(errOut, refused) {
		t.Errorf("rotate --bus: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var rr fleet.RootReader
	ctx := meshtest.Context(t, time.Minute)
	if v, why, err := rr.Newest(ctx, b.Conn.JS, b.Names); v != 1 || !strings.HasPrefix(why, refused) || err != nil {
		t.Errorf("fleet's newest root with a forged root.2: v%d, %q, %v", v, why, err)
	}

	mustRun(t, nil, "trust", "sign", c.root(2), "--key", c.key(2))
	out = mustRun(t, env, "trust", "publish", c.root(2))
	if !strings.Contains(out, "published root v2") || !strings.Contains(out, "replaced root.2, which did not verify as the next root (") {
		t.Errorf("publish over the forged root.2 said %q", out)
	}
	shown = showJSON{}
	if err := json.Unmarshal([]byte(mustRun(t, env, "trust", "show", "--bus", "--json")), &shown); err != nil {
		t.Fatal(err)
	}
	if shown.Version != 2 || shown.Refused != "" || len(shown.OnBus) != 2 {
		t.Errorf("show --bus after the replacement = %+v", shown)
	}
	if v, why, err := rr.Newest(ctx, b.Conn.JS, b.Names); v != 2 || why != "" || err != nil {
		t.Errorf("fleet's newest root after the replacement: v%d, %q, %v", v, why, err)
	}

	// A verified root.2 stays: the same root with a third signature is other bytes.
	mustRun(t, nil, "trust", "sign", c.root(2), "--key", c.key(3))
	code, _, errOut = runMain(t, env, "trust", "publish", c.root(2))
	if code != 1 || !strings.Contains(errOut, "root v2 is on the bus already (root.2 in mesh_host_releases) with other content or signatures; a published root is never replaced") {
		t.Errorf("publish over a verified root.2: exit %d, %q", code, errOut)
	}
}

// trust sign adds a second signature to a manifest (a releases threshold of 2), in place, and
// refuses the same key twice.
func TestTrustSignAddsASecondSignatureToAManifest(t *testing.T) {
	dir := t.TempDir()
	var keys []string
	for _, n := range []string{"a", "b"} {
		if _, err := build.Keygen(filepath.Join(dir, n)); err != nil {
			t.Fatal(err)
		}
		keys = append(keys, filepath.Join(dir, n, "release.key"))
	}
	first, _ := build.LoadKey(keys[0])
	m := wire.Manifest{Schema: 1, Version: "v1.2.0", OS: "linux", Arch: "amd64", Object: wire.ObjectName("v1.2.0", "linux", "amd64"),
		Size: 1, Digest: digest.Digest("sha256:" + strings.Repeat("a", 64)), BinaryDigest: digest.Digest("sha256:" + strings.Repeat("b", 64)), Created: time.Now().UTC().Format(time.RFC3339)}
	if err := m.Sign(first); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "manifest.json")
	if err := os.WriteFile(file, m.Marshal(), 0o644); err != nil {
		t.Fatal(err)
	}
	out := mustRun(t, nil, "trust", "sign", file, "--key", keys[1])
	if !strings.Contains(out, "it carries 2 signatures") {
		t.Errorf("sign said %q", out)
	}
	b, _ := os.ReadFile(file)
	got, err := wire.ParseManifest(b)
	if err != nil || len(got.SignatureList.List()) != 2 {
		t.Fatalf("the manifest after sign: %v\n%s", err, b)
	}
	code, _, errOut := runMain(t, nil, "trust", "sign", file, "--key", keys[0])
	if code != 1 || !strings.Contains(errOut, "has signed it already") {
		t.Errorf("signing twice: exit %d, %q", code, errOut)
	}
}
