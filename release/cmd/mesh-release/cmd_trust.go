package main

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/trustroot"
	"github.com/novox/mesh-host/wire"
)

const trustArgs = "init | sign FILE | rotate | show [FILE] | publish FILE"

const trustAbout = `The root of trust (decision 0045): a root names the keys of each role — root (signs roots),
releases (signs manifests) and targets (signs targets, windows, the withdrawal list, bus
configurations) — and how many of each must sign. Nodes follow it over the bus: version N+1 is
taken only when a threshold of version N's root keys and of its own signed it.

The root keys are offline and apart: ` + "`trust init`" + ` writes them once (root-1.key, root-2.key, …)
to be carried to as many places; a new root is a file (root.<v>.json) that travels between the
people holding them, each running ` + "`trust sign FILE --key root-N.key`" + ` on their own machine,
until ` + "`trust publish`" + ` puts it on the bus (KV <prefix>_host_releases, key root.<v>).

A stolen release key: ` + "`trust rotate --role releases --add new.pub --remove KEYID`" + `, signed by a
threshold of root keys, published: every node then refuses what the old key signs.

exit status: 0 done, 1 an error (a refusal says why), 2 usage.`

var trustCommands = []command{
	{"trust init", "", "make the root keys and root v1 (the offline ceremony)", trustInitAbout, trustInitCmd},
	{"trust sign", "FILE", "add one key's signature to a root (or a manifest, target, window, withdrawal list) file, in place", trustSignAbout, trustSignCmd},
	{"trust rotate", "", "write the next root version from the newest: a role's keys or threshold changed, expiry renewed", trustRotateAbout, trustRotateCmd},
	{"trust show", "[FILE | --bus]", "show a root: version, expiry, keys per role, signatures and which thresholds are met", "", trustShowCmd},
	{"trust publish", "FILE", "put a root on the bus, when it is the next version and verifies", trustPublishAbout, trustPublishCmd},
}

func trustCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	return dispatch(ctx, s, fs, args, "trust", trustCommands)
}

// repeated is a flag given any number of times.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(s string) error { *r = append(*r, s); return nil }

const trustInitAbout = `Writes --root-keys root key files to --out (root-1.key … with root-1.pub; each .key mode 0600),
and root.1.json: root v1, with those root keys and --threshold, the releases role holding
--releases-key and the targets role --targets-key (default: the releases keys), signed by
--threshold of the new root keys. Give --sign-with release.key (the key the nodes' host.json
trusts today): nodes that trust it take root v1 once, by that signature, and from then on
follow only the chain. Existing files are refused unless --force.

Then move each root-N.key to its own place — offline, held by its own person; no machine keeps
two — and publish: mesh-release trust publish DIR/root.1.json.`

func trustInitCmd(_ context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	n := fs.Int("root-keys", 3, "how many root keys to make")
	threshold := fs.Int("threshold", 2, "how many root keys must sign a new root")
	out := fs.String("out", "", "`DIR` to write the root keys and root.1.json into (required)")
	var releases, targetKeys repeated
	fs.Var(&releases, "releases-key", "public key `FILE` (release.pub) of the releases role, which signs manifests (required; repeat for several)")
	fs.Var(&targetKeys, "targets-key", "public key `FILE` of the targets role, which signs targets, windows and withdrawals (repeatable; default: the releases keys)")
	expires := fs.Duration("expires", trustroot.DefaultExpires, "how long root v1 lasts; renew it before then with trust rotate")
	maxTTL := fs.Duration("targets-max-ttl", trustroot.DefaultTargetsMaxTTL, "the longest a document the targets role signs may last (0: no limit)")
	signWith := fs.String("sign-with", "", "the current release key `FILE` (release.key): its signature lets nodes holding only host.json keys take root v1")
	force := fs.Bool("force", false, "replace existing files in --out")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	switch {
	case *out == "":
		return usagef("--out DIR is required")
	case *n < 1 || *n > wire.MaxRootKeys:
		return usagef("--root-keys %d: make 1 to %d root keys", *n, wire.MaxRootKeys)
	case *threshold < 1 || *threshold > *n:
		return usagef("--threshold %d: it must be between 1 and --root-keys (%d)", *threshold, *n)
	case len(releases) == 0:
		return usagef("--releases-key FILE is required: the public key that signs manifests (release.pub)")
	case *expires <= 0 || *maxTTL < 0:
		return usagef("--expires and --targets-max-ttl must be positive")
	}
	spec := trustroot.Spec{Threshold: *threshold, Expires: *expires, TargetsMaxTTL: *maxTTL}
	var err error
	if spec.Releases, err = readPubs("--releases-key", releases); err != nil {
		return err
	}
	spec.Targets = spec.Releases
	if len(targetKeys) > 0 {
		if spec.Targets, err = readPubs("--targets-key", targetKeys); err != nil {
			return err
		}
	}
	var legacy ed25519.PrivateKey
	if *signWith != "" {
		if legacy, err = build.LoadKey(*signWith); err != nil {
			return fmt.Errorf("--sign-with: %w", err)
		}
	}
	rootFile := filepath.Join(*out, trustroot.FileName(1))
	if !*force {
		if _, err := os.Lstat(rootFile); err == nil {
			return fmt.Errorf("%s already exists; move it aside, or give --force to replace it", rootFile)
		}
	}
	keys, err := trustroot.WriteKeys(*out, *n, *force)
	if err != nil {
		return err
	}
	for _, k := range keys {
		spec.RootKeys = append(spec.RootKeys, k.Priv.Public().(ed25519.PublicKey))
	}
	r, err := trustroot.New(spec, time.Now())
	if err != nil {
		return err
	}
	for _, k := range keys[:*threshold] {
		if err := r.Sign(k.Priv); err != nil {
			return err
		}
	}
	if legacy != nil {
		if err := r.Sign(legacy); err != nil {
			return fmt.Errorf("--sign-with: %w", err)
		}
	}
	if err := trustroot.WriteFile(rootFile, r); err != nil {
		return err
	}
	sayInit(s, *out, keys, r, rootFile)
	return nil
}

// sayInit says what init wrote and what to do with each file.
func sayInit(s *stdio, dir string, keys []trustroot.KeyPair, r wire.Root, rootFile string) {
	for i, k := range keys {
		s.printf("wrote %s (root key %d of %d, key_id %s) and %s\n", k.KeyPath, i+1, len(keys), k.ID(), k.PubPath)
	}
	s.printf("wrote %s: root v%d, expires %s, fingerprint %s\n", rootFile, r.Version, r.Expires, r.Fingerprint())
	s.println(trustroot.Summary(r, nil))
	names := make([]string, len(keys))
	for i := range keys {
		names[i] = trustroot.KeyFile(i + 1)
	}
	s.printf("next:\n")
	s.printf("  1. move %s to %d separate places (offline: a hardware token, a safe), each held by one person; no machine keeps two, and none stays in %s\n", oneOfAnd(names), len(keys), dir)
	s.printf("  2. publish the root: mesh-release trust publish %s\n", rootFile)
	s.printf("  3. keep the .pub files and %s: they are public, and each later root is made from the newest\n", filepath.Base(rootFile))
	if top, ok := gitWorkTree(dir); ok {
		fmt.Fprintf(s.err, "mesh-release trust init: warning: the root keys in %s are inside the git work tree %s: move them out now and keep them out of every commit\n", dir, top)
	}
}

// oneOfAnd lists names: "a, b and c".
func oneOfAnd(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// readPubs reads public key files (release.pub's form); a value that is no file but a base64 key
// is taken as the key itself.
func readPubs(flagName string, files []string) ([]ed25519.PublicKey, error) {
	var out []ed25519.PublicKey
	for _, f := range files {
		pub, err := readPub(f)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", flagName, text.Bound(f), err)
		}
		out = append(out, pub)
	}
	return out, nil
}

func readPub(f string) (ed25519.PublicKey, error) {
	b, err := os.ReadFile(f)
	if errors.Is(err, fs.ErrNotExist) {
		if pub, perr := wire.ParseTrustedKey(f); perr == nil {
			return pub, nil
		}
	}
	if err != nil {
		return nil, err
	}
	if len(b) > 1<<10 {
		return nil, fmt.Errorf("%d bytes: a public key file holds one base64 line", len(b))
	}
	return wire.ParseTrustedKey(strings.TrimSpace(string(b)))
}

const trustSignAbout = `Adds --key's signature to FILE, in place (temp file, fsync, rename). FILE is a root
(root.<v>.json), or any other signed document (a manifest, a target, a window, the withdrawal
list; a target or window with --name, the KV key it is stored under) when its role needs more
than one signature (a releases threshold of 2: two people each sign the manifest).

For a root it says which thresholds are met now: for root v(N+1), N's root keys and its own. The
root it follows is --prev, else root.<N>.json beside FILE when there is one. A key that signed
already is refused; so is a key whose signature on a root would count for nothing (not a root
key of v(N) or v(N+1); on v1 also not one of its releases and targets keys): a wrong key file is
a mix-up to catch, not a signature to add.

exit status: 0 signed, 1 refused or an error, 2 usage.`

// maxSignFile bounds the file sign reads: more than any signed document may be.
const maxSignFile = 1 << 20

func trustSignCmd(_ context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	keyPath := fs.String("key", "", "the key `FILE` to sign with: a root key (root-N.key), or a releases or targets key (required)")
	prevPath := fs.String("prev", "", "for a root: the root `FILE` FILE follows (default: root.<N>.json beside FILE)")
	name := fs.String("name", "", "for a target or window: the KV `KEY` it is stored under (node.web-01, fleet, window.fleet)")
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want FILE, the document to sign, got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	}
	if *keyPath == "" {
		return missingError{"--key FILE is required: the key (root-N.key for a root) whose signature to add"}
	}
	key, err := build.LoadKey(*keyPath)
	if err != nil {
		return fmt.Errorf("--key: %w", err)
	}
	file := pos[0]
	b, err := readBounded(file, maxSignFile)
	if err != nil {
		return err
	}
	if !isRoot(b) {
		return signDocument(s, file, *name, b, key)
	}
	r, err := wire.ParseRoot(b)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	prev, err := prevRoot(file, *prevPath, r)
	if err != nil {
		return err
	}
	id := wire.KeyID(key.Public().(ed25519.PublicKey))
	if err := trustroot.CanSign(r, prev, id); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	signed, err := wire.AddSignature(wire.KindRoot, "", b, key)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if r, err = wire.ParseRoot(signed); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if err := trustroot.WriteFile(file, r); err != nil {
		return err
	}
	s.printf("signed root v%d with key %s: %s\n", r.Version, id, file)
	s.println(trustroot.Summary(r, prev))
	if trustroot.Complete(r, prev) {
		s.printf("every threshold is met: publish it with mesh-release trust publish %s\n", file)
	} else {
		s.printf("more signatures needed: pass %s to the holder of another root key\n", file)
	}
	return nil
}

// signDocument adds key's signature to a signed document other than a root (wire.AddSignature
// recognises its kind) and writes it back in place.
func signDocument(s *stdio, file, name string, b []byte, key ed25519.PrivateKey) error {
	signed, err := wire.AddSignature("", name, b, key)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	st, err := os.Stat(file)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(file, signed, st.Mode().Perm()); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	var sigs struct {
		KeyID      string           `json:"key_id"`
		Signatures []wire.Signature `json:"signatures"`
	}
	_ = json.Unmarshal(signed, &sigs)
	ids := []string{}
	if sigs.KeyID != "" {
		ids = append(ids, sigs.KeyID)
	}
	for _, sg := range sigs.Signatures {
		ids = append(ids, sg.KeyID)
	}
	s.printf("signed %s with key %s; it carries %d %s (%s): as many keys of its role as the root's threshold must sign it (mesh-release trust show --bus)\n",
		file, wire.KeyID(key.Public().(ed25519.PublicKey)), len(ids), text.Plural(len(ids), "signature", "signatures"), strings.Join(ids, ", "))
	return nil
}

// isRoot reports whether b is a root's JSON (it alone has roles).
func isRoot(b []byte) bool {
	var fields map[string]json.RawMessage
	if json.Unmarshal(b, &fields) != nil {
		return false
	}
	_, ok := fields["roles"]
	return ok
}

// readBounded reads a file of at most limit bytes.
func readBounded(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("%s is more than %d bytes: no signed document is that large", path, limit)
	}
	return b, nil
}

// prevRoot is the root r follows: the file given, else root.<N>.json beside file, else nil
// (version 1 follows none). A given file of another version is refused.
func prevRoot(file, given string, r wire.Root) (*wire.Root, error) {
	if r.Version == 1 {
		if given != "" {
			return nil, usagef("--prev: root v1 follows no root")
		}
		return nil, nil
	}
	path := given
	if path == "" {
		path = filepath.Join(filepath.Dir(file), trustroot.FileName(r.Version-1))
		if _, err := os.Stat(path); err != nil {
			return nil, nil
		}
	}
	p, err := trustroot.ReadFile(path)
	if err != nil {
		return nil, err
	}
	if p.Version != r.Version-1 {
		return nil, fmt.Errorf("%s holds root v%d; root v%d follows v%d", path, p.Version, r.Version, r.Version-1)
	}
	return &p, nil
}

const trustRotateAbout = `Writes the next root version, unsigned, from the newest (--from FILE, or --bus: the newest root
on the bus): --role's keys changed (--add a public key file, --remove a key id, each
repeatable), its --threshold if given, and the expiry renewed (--expires from now). With no
change, it only renews. It refuses removing the last key of a role, a threshold above the
keys, a key id the role does not hold. The file (--out, default root.<N+1>.json beside --from,
or in the current directory with --bus) is then signed with trust sign by a threshold of the
current root keys and of the new ones, and published.

--role root rotates the root keys themselves: the new root must still be signed by a threshold
of the old root keys.`

func trustRotateCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	role := fs.String("role", "", "the role to change: root, releases or targets; comma-separated for several (releases,targets: a stolen key that held both)")
	var add, remove repeated
	fs.Var(&add, "add", "public key `FILE` to add to --role (repeatable)")
	fs.Var(&remove, "remove", "`KEYID` to remove from --role (16 hex digits or its first 8 or more; repeatable)")
	threshold := fs.Int("threshold", 0, "--role's new threshold (default: kept)")
	from := fs.String("from", "", "the newest root `FILE` (root.<N>.json)")
	fromBus := fs.Bool("bus", false, "take the newest root from the bus (the default without --from)")
	out := fs.String("out", "", "`FILE` to write (default root.<N+1>.json beside --from)")
	expires := fs.Duration("expires", trustroot.DefaultExpires, "how long the new root lasts from now")
	maxTTL := fs.String("targets-max-ttl", "", "with --role targets: the new max_ttl (0 drops it; default: kept)")
	force := fs.Bool("force", false, "replace --out if it exists")
	var b busFlags
	b.register(fs, s.getenv)
	if err := noArgs(fs, args); err != nil {
		return err
	}
	c := trustroot.Change{Threshold: *threshold, Expires: *expires}
	if *from == "" {
		*fromBus = true // the newest root the nodes walk to is the bus's
	}
	if err := rotateFlags(&c, *role, add, remove, *maxTTL, *from, *fromBus); err != nil {
		return err
	}
	cur, dir, err := newestRoot(ctx, s, b, *from, *fromBus)
	if err != nil {
		return err
	}
	next, err := trustroot.Rotate(cur, c, time.Now())
	if err != nil {
		return fmt.Errorf("root v%d: %w", cur.Version+1, err)
	}
	path := *out
	if path == "" {
		path = filepath.Join(dir, trustroot.FileName(next.Version))
	}
	if !*force {
		if _, err := os.Lstat(path); err == nil {
			return fmt.Errorf("%s already exists; move it aside, or give --force to replace it (it may hold signatures)", path)
		}
	}
	if err := trustroot.WriteFile(path, next); err != nil {
		return err
	}
	s.printf("wrote %s: root v%d from v%d (%s), expires %s, unsigned\n", path, next.Version, cur.Version, describeChange(cur, next), next.Expires)
	s.printf("next: sign it with %d of root v%d's root keys and %d of its own (mesh-release trust sign %s --key root-N.key), then mesh-release trust publish %s\n",
		cur.Roles[wire.RoleRoot].Threshold, cur.Version, next.Roles[wire.RoleRoot].Threshold, path, path)
	return nil
}

// rotateFlags checks rotate's flags and fills c from them.
func rotateFlags(c *trustroot.Change, role string, add, remove []string, maxTTL, from string, fromBus bool) error {
	switch {
	case from != "" && fromBus:
		return usagef("give --from or --bus, not both")
	case role == "" && (len(add) > 0 || len(remove) > 0 || c.Threshold != 0 || maxTTL != ""):
		return usagef("--role is required to change keys: root, releases or targets")
	case c.Threshold < 0:
		return usagef("--threshold %d: want 1 or more", c.Threshold)
	case c.Expires <= 0:
		return usagef("--expires must be positive")
	}
	for _, r := range strings.Split(role, ",") {
		if r == "" && role == "" {
			continue // nothing changes: the root is renewed
		}
		if !slices.Contains(wire.Roles, wire.Role(r)) || slices.Contains(c.Roles, wire.Role(r)) {
			return usagef("--role %q: want root, releases or targets, each once", text.Bound(role))
		}
		c.Roles = append(c.Roles, wire.Role(r))
	}
	if maxTTL != "" {
		if !slices.Contains(c.Roles, wire.RoleTargets) {
			return usagef("--targets-max-ttl goes with --role targets")
		}
		d, err := time.ParseDuration(maxTTL)
		if err != nil || d < 0 {
			return usagef("--targets-max-ttl %q: want a duration like 720h (0 drops it)", text.Bound(maxTTL))
		}
		c.MaxTTL = &d
	}
	var err error
	if c.Add, err = readPubs("--add", add); err != nil {
		return err
	}
	c.Remove = remove
	return nil
}

// newestRoot reads the root to rotate from: the file, or the newest verified root on the bus
// (saying on stderr which root.<n> after it was refused); dir is where the next one is written by
// default.
func newestRoot(ctx context.Context, s *stdio, b busFlags, from string, fromBus bool) (wire.Root, string, error) {
	if !fromBus {
		r, err := trustroot.ReadFile(from)
		return r, filepath.Dir(from), err
	}
	chain, err := busRoots(ctx, b)
	if err != nil {
		return wire.Root{}, "", err
	}
	if chain.Refused != nil {
		fmt.Fprintf(s.err, "mesh-release trust rotate: %s; publishing the next root replaces it\n", chain.Refused)
	}
	if len(chain.Roots) == 0 {
		return wire.Root{}, "", fmt.Errorf("the bus holds no root yet: make root v1 with mesh-release trust init")
	}
	return chain.Roots[len(chain.Roots)-1], ".", nil
}

// busRoots reads the chain of verified roots on the bus, oldest first, and the root it stops at.
func busRoots(ctx context.Context, b busFlags) (trustroot.Chain, error) {
	c, err := b.connect(ctx)
	if err != nil {
		return trustroot.Chain{}, err
	}
	defer c.Close()
	kv, err := c.JS.KeyValue(ctx, b.names().Releases())
	if err != nil {
		return trustroot.Chain{}, fmt.Errorf("open %s: %w", b.names().Releases(), err)
	}
	return trustroot.ReadChain(ctx, kv)
}

// describeChange is what differs between two roots' roles: "releases: +a1b2c3d4…, -82912897…".
func describeChange(cur, next wire.Root) string {
	var parts []string
	for _, role := range wire.Roles {
		a, b := cur.Roles[role], next.Roles[role]
		var d []string
		for _, id := range b.Keys {
			if !cur.HasKey(role, id) {
				d = append(d, "+"+id)
			}
		}
		for _, id := range a.Keys {
			if !next.HasKey(role, id) {
				d = append(d, "-"+id)
			}
		}
		if a.Threshold != b.Threshold {
			d = append(d, fmt.Sprintf("threshold %d→%d", a.Threshold, b.Threshold))
		}
		if a.MaxTTL != b.MaxTTL {
			d = append(d, fmt.Sprintf("max_ttl %q→%q", a.MaxTTL, b.MaxTTL))
		}
		if len(d) > 0 {
			parts = append(parts, string(role)+": "+strings.Join(d, ", "))
		}
	}
	if len(parts) == 0 {
		return "renewed, no key changed"
	}
	return strings.Join(parts, "; ")
}

const trustPublishAbout = `Puts the root in FILE on the bus (KV <prefix>_host_releases, key root.<v>) when it is the next
version after the newest there and verifies as a node verifies it: signed by a threshold of the
previous root's root keys and of its own (root v1: of its own). Going back, a gap and a version
already on the bus with other content are refused; the same file again changes nothing (exit 0).
Nodes take the root on their next look at the bus.`

func trustPublishCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want FILE, the root to publish, got %d %s", len(pos), text.Plural(len(pos), "argument", "arguments"))
	}
	r, err := trustroot.ReadFile(pos[0])
	if err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	kv, err := c.JS.KeyValue(ctx, b.names().Releases())
	if err != nil {
		return fmt.Errorf("open %s: %w", b.names().Releases(), err)
	}
	res, err := trustroot.Publish(ctx, kv, r)
	if err != nil {
		return err
	}
	if res.Already {
		s.printf("root v%d is on the bus already (%s in %s) with these bytes: nothing to do\n", r.Version, res.Key, res.Bucket)
		return nil
	}
	s.printf("published root v%d (%s, expires %s) in %s as %s\n", r.Version, r.Fingerprint(), r.Expires, res.Bucket, res.Key)
	if res.Replaced != nil {
		s.printf("replaced %s, which did not verify as the next root (%s)\n", res.Key, text.Bound(res.Replaced.Err.Error()))
	}
	if _, legacy := trustroot.Status(r, nil); r.Version == 1 && len(legacy) == 0 {
		fmt.Fprintf(s.err, "mesh-release trust publish: warning: root v1 carries no signature by a releases or targets key: nodes holding only host.json keys (trusted_keys) will not take it; nodes enrolled with a token naming it will\n")
	}
	return nil
}

// showJSON is trust show --json.
type showJSON struct {
	Source      string                `json:"source"`
	Version     uint64                `json:"version"`
	Expires     string                `json:"expires"`
	Expired     bool                  `json:"expired"`
	Fingerprint string                `json:"fingerprint"`
	Roles       map[wire.Role]roleOut `json:"roles"`
	Signatures  []string              `json:"signatures"`
	Thresholds  []trustroot.Threshold `json:"thresholds"`
	Complete    bool                  `json:"complete"`
	OnBus       []uint64              `json:"on_bus,omitempty"`
	Refused     string                `json:"refused,omitempty"`
}

type roleOut struct {
	Keys      []string `json:"keys"`
	Threshold int      `json:"threshold"`
	MaxTTL    string   `json:"max_ttl,omitempty"`
}

func trustShowCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	fromBus := fs.Bool("bus", false, "show the newest root on the bus and check the chain there (the default without FILE)")
	prevPath := fs.String("prev", "", "the root `FILE` FILE follows (default: root.<N>.json beside FILE)")
	asJSON := fs.Bool("json", false, "write it as JSON")
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		*fromBus = true // with no file, the root the nodes walk to: the bus's
	}
	var out showJSON
	var r wire.Root
	var prev *wire.Root
	switch {
	case len(pos) == 1 && !*fromBus:
		if r, err = trustroot.ReadFile(pos[0]); err != nil {
			return err
		}
		if prev, err = prevRoot(pos[0], *prevPath, r); err != nil {
			return err
		}
		out.Source = pos[0]
	case len(pos) == 0 && *fromBus:
		chain, err := busRoots(ctx, b)
		if err != nil {
			return err
		}
		roots := chain.Roots
		if chain.Refused != nil {
			out.Refused = chain.Refused.String()
		}
		if len(roots) == 0 {
			if out.Refused != "" {
				return fmt.Errorf("the bus holds no root that verifies (%s): nodes trust their host.json keys", out.Refused)
			}
			return fmt.Errorf("the bus holds no root yet (%s): nodes trust their host.json keys", b.names().Releases())
		}
		r = roots[len(roots)-1]
		if len(roots) > 1 {
			prev = &roots[len(roots)-2]
		}
		for _, x := range roots {
			out.OnBus = append(out.OnBus, x.Version)
		}
		out.Source = b.names().Releases() + " " + wire.RootKey(r.Version)
	default:
		return usagef("give FILE or --bus, one of them")
	}
	fillShow(&out, r, prev)
	if *asJSON {
		enc := json.NewEncoder(s.out)
		enc.SetIndent("", "  ")
		return enc.Encode(out)
	}
	printShow(s, out)
	return nil
}

func fillShow(out *showJSON, r wire.Root, prev *wire.Root) {
	out.Version, out.Expires, out.Fingerprint = r.Version, r.Expires, r.Fingerprint()
	out.Expired = !time.Now().Before(r.ExpiresAt())
	out.Roles = map[wire.Role]roleOut{}
	for _, role := range wire.Roles {
		rk := r.Roles[role]
		out.Roles[role] = roleOut{Keys: rk.Keys, Threshold: rk.Threshold, MaxTTL: rk.MaxTTL}
	}
	out.Signatures = []string{}
	for _, sg := range r.Signatures {
		out.Signatures = append(out.Signatures, sg.KeyID)
	}
	out.Thresholds, _ = trustroot.Status(r, prev)
	out.Complete = trustroot.Complete(r, prev)
}

func printShow(s *stdio, o showJSON) {
	s.printf("root v%d (%s)\n", o.Version, o.Source)
	exp := o.Expires
	if o.Expired {
		exp += " — EXPIRED: nodes holding it as their newest say `trust expired since " + o.Expires + "` and take no new target"
	}
	s.printf("expires      %s\n", exp)
	s.printf("fingerprint  %s\n", o.Fingerprint)
	for _, role := range wire.Roles {
		rk := o.Roles[role]
		line := fmt.Sprintf("%-12s %d of %d: %s", role, rk.Threshold, len(rk.Keys), strings.Join(rk.Keys, ", "))
		if rk.MaxTTL != "" {
			line += " (max_ttl " + rk.MaxTTL + ")"
		}
		s.println(line)
	}
	s.printf("signatures   %s\n", noneIfEmpty(strings.Join(o.Signatures, ", ")))
	for _, t := range o.Thresholds {
		s.printf("threshold    %s\n", t)
	}
	if len(o.OnBus) > 0 {
		s.printf("on the bus   v%d to v%d, the chain verifies\n", o.OnBus[0], o.OnBus[len(o.OnBus)-1])
	}
	if o.Refused != "" {
		s.printf("refused      %s; nodes stop before it, and publishing the next root replaces it\n", o.Refused)
	}
	if !o.Complete && o.Version > 1 && len(o.Thresholds) == 1 {
		s.printf("root v%d not given (--prev): its root keys were not counted\n", o.Version-1)
	}
}

func noneIfEmpty(s string) string {
	if s == "" {
		return "none"
	}
	return s
}
