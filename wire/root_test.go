package wire_test

import (
	"encoding/base64"
	"errors"
	"strings"
	"testing"

	"github.com/novox/mesh-host/wire"
)

// The signed text of a root is the one docs/wire.md and Root's comment document.
func TestRootSigningTextIsTheDocumentedText(t *testing.T) {
	r := makeRoot(4, roleSpec{keys(rootA), 1, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, "720h0m0s"})
	r.Expires = "2027-12-02T00:00:00Z"
	id := func(k []byte) string { return wire.KeyID(k) }
	ra, rl, tg := id(pubOf(rootA)), id(pubOf(relA)), id(pubOf(tgtA))
	lines := map[string]string{
		ra: "key=" + ra + " " + base64.StdEncoding.EncodeToString(pubOf(rootA)) + "\n",
		rl: "key=" + rl + " " + base64.StdEncoding.EncodeToString(pubOf(relA)) + "\n",
		tg: "key=" + tg + " " + base64.StdEncoding.EncodeToString(pubOf(tgtA)) + "\n",
	}
	ids := []string{ra, rl, tg}
	slicesSort(ids)
	want := "mesh-host root 1\nversion=4\nexpires=2027-12-02T00:00:00Z\n" + lines[ids[0]] + lines[ids[1]] + lines[ids[2]] +
		"role=root threshold=1 keys=" + ra + " max_ttl=\n" +
		"role=releases threshold=1 keys=" + rl + " max_ttl=\n" +
		"role=targets threshold=1 keys=" + tg + " max_ttl=720h0m0s\n"
	if got := string(r.SigningText()); got != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, want)
	}
	signed := sign(t, r, rootA)
	back, err := wire.ParseRoot(signed.Marshal())
	if err != nil || string(back.Marshal()) != string(signed.Marshal()) {
		t.Fatalf("round trip: %v\n%s", err, back.Marshal())
	}
	if err := signed.Sign(rootA); err == nil || !strings.Contains(err.Error(), "has signed it already") {
		t.Fatalf("a root key signing twice: %v", err)
	}
	if !strings.HasPrefix(string(signed.Marshal()), "{\n  \"schema\": 1,\n  \"version\": 4,") {
		t.Fatalf("root file:\n%s", signed.Marshal())
	}
	if wire.RootKey(4) != "root.4" {
		t.Fatalf("RootKey(4) = %s", wire.RootKey(4))
	}
}

// Every field of a root that is wrong is refused by name.
func TestRootValidateNamesWhatIsWrong(t *testing.T) {
	relID := wire.KeyID(pubOf(relA))
	for _, tc := range []struct {
		name string
		edit func(*wire.Root)
		want string
	}{
		{"schema", func(r *wire.Root) { r.Schema = 2 }, "schema 2 is not supported"},
		{"version 0", func(r *wire.Root) { r.Version = 0 }, "version 0 is not between 1 and"},
		{"expires", func(r *wire.Root) { r.Expires = "next year" }, `expires "next year" is not an RFC 3339 time`},
		{"no keys", func(r *wire.Root) { r.Keys = nil }, "0 keys"},
		{"a key not base64", func(r *wire.Root) { r.Keys[relID] = "!!" }, "key " + relID},
		{"a key under another id", func(r *wire.Root) {
			r.Keys[relID] = base64.StdEncoding.EncodeToString(pubOf(outsider))
		}, "is listed under the id " + relID},
		{"a role missing", func(r *wire.Root) { delete(r.Roles, wire.RoleTargets) }, "roles must be exactly root, releases and targets"},
		{"an unknown role", func(r *wire.Root) {
			delete(r.Roles, wire.RoleTargets)
			r.Roles["rollouts"] = r.Roles[wire.RoleReleases]
		}, "role targets is missing"},
		{"a role without keys", func(r *wire.Root) { r.Roles[wire.RoleReleases] = wire.RoleKeys{Threshold: 1} }, "role releases has no keys"},
		{"a role naming a key keys lacks", func(r *wire.Root) {
			r.Roles[wire.RoleReleases] = wire.RoleKeys{Keys: []string{"0000000000000000"}, Threshold: 1}
		}, "names key 0000000000000000, which keys does not hold"},
		{"threshold 0", func(r *wire.Root) { r.Roles[wire.RoleReleases] = wire.RoleKeys{Keys: []string{relID}} }, "threshold 0 is not between 1 and its 1 keys"},
		{"threshold above the keys", func(r *wire.Root) { r.Roles[wire.RoleReleases] = wire.RoleKeys{Keys: []string{relID}, Threshold: 2} }, "threshold 2"},
		{"max_ttl on releases", func(r *wire.Root) {
			r.Roles[wire.RoleReleases] = wire.RoleKeys{Keys: []string{relID}, Threshold: 1, MaxTTL: "1h0m0s"}
		}, "max_ttl is for the targets role only"},
		{"max_ttl not as Go writes it", func(r *wire.Root) {
			rk := r.Roles[wire.RoleTargets]
			rk.MaxTTL = "30d"
			r.Roles[wire.RoleTargets] = rk
		}, `max_ttl "30d"`},
		{"a key in no role", func(r *wire.Root) {
			r.Keys[wire.KeyID(pubOf(outsider))] = base64.StdEncoding.EncodeToString(pubOf(outsider))
		}, "is in no role"},
		{"a signature's key id", func(r *wire.Root) { r.Signatures = []wire.Signature{{KeyID: "x", Signature: "y"}} }, "signatures[0].key_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := makeRoot(4, roleSpec{keys(rootA), 1, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, "720h0m0s"})
			tc.edit(&r)
			err := r.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
			if _, perr := wire.ParseRoot(r.Marshal()); perr == nil {
				t.Fatal("ParseRoot took it")
			}
		})
	}
	if _, err := wire.ParseRoot([]byte(`{"schema":1,"version":1,"colour":"red"}`)); err == nil || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("an unknown field: %v", err)
	}
}

// A root's signatures are a list even with one (roots are new: no older reader to match).
func TestRootSignaturesAreAList(t *testing.T) {
	r := sign(t, makeRoot(1, roleSpec{keys(rootA), 1, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, ""}), rootA)
	if !strings.Contains(string(r.Marshal()), `"signatures": [`) {
		t.Fatalf("%s", r.Marshal())
	}
	unsigned := makeRoot(1, roleSpec{keys(rootA), 1, ""}, roleSpec{keys(relA), 1, ""}, roleSpec{keys(tgtA), 1, ""})
	if !strings.Contains(string(unsigned.Marshal()), `"signatures": []`) {
		t.Fatalf("%s", unsigned.Marshal())
	}
	if _, err := wire.PinnedTrust(unsigned, unsigned.Fingerprint()); !errors.Is(err, wire.ErrNotSigned) {
		t.Fatalf("an unsigned root: %v", err)
	}
}
