package main

import (
	"context"
	"crypto/ed25519"
	"errors"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/novox/mesh-host/release/build"
	"github.com/novox/mesh-host/release/publish"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
)

const targetAbout = `VERSION (vX.Y.Z) must be published and not withdrawn. Each NODE gets its own target;
--fleet sets the one every node without its own falls back to. A NODE that has never
heartbeated on this bus is refused, so that a mistyped id is not targeted silently; --force
sets it for a node not yet started. Prints "target VERSION set for NODE (revision N)".
Every target is signed with --key (the release key, or a target key the hosts trust in
trusted_target_keys) and valid for --target-ttl: a host refuses an unsigned target and does not
act on an expired one, so keep ` + "`mesh-release serve --key`" + ` or a rollout controller running to
sign targets again before they expire, or target again. A node stands aside for its target
only inside its maintenance window (` + "`mesh-release window`" + `) unless the target is --urgent.
--fleet is refused for a version with no build for the platform of a node heard within the
last 10m (a rollout's default --alive; a node's heartbeat says its platform), or of manifest
schema 4 while such a node's host cannot read it, naming the platforms and how many nodes each,
unless those nodes are left out explicitly (--skip-platform, --skip-old-hosts): they keep what
they run, their hosts refusing the fleet target by name. To stage a release across the fleet, halting by itself on
trouble, use ` + "`mesh-release rollout start VERSION`" + `.`

func targetCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	fleet := fs.Bool("fleet", false, "set the fleet target every node without its own falls back to")
	force := fs.Bool("force", false, "set it even for a NODE that has never heartbeated (a node not yet started)")
	urgent := fs.Bool("urgent", false, "sign the target urgent: nodes stand aside for it as soon as it is staged, without waiting for their maintenance windows")
	var skip platformList
	var skipOld bool
	registerSkips(fs, &skip, &skipOld, "the --fleet target")
	var k keyFlags
	k.register(fs, true, s.getenv)
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) == 0:
		return usagef("want NODE… VERSION, or --fleet VERSION")
	case *fleet && len(pos) > 1:
		return usagef("give node ids or --fleet, not both")
	case !*fleet && len(pos) == 1:
		return usagef("no node ids given; name nodes before the version, or use --fleet for every node")
	case !*fleet && (len(skip) > 0 || skipOld):
		return usagef("--skip-platform and --skip-old-hosts leave nodes out of the --fleet target; a node named is targeted as named")
	}
	version, nodes := pos[len(pos)-1], pos[:len(pos)-1]
	for _, node := range nodes {
		if err := wire.ValidNode(node); err != nil {
			return err
		}
	}
	signer, err := k.signer()
	if err != nil {
		return err
	}
	signer.Urgent = *urgent
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	names := b.names()
	never, err := unheard(ctx, c.JS, names, nodes, *force)
	if err != nil {
		return err
	}
	if len(never) > 0 && !*force {
		return neverHeardError(ctx, c.JS, names, never, "no target was set.")
	}
	var skipped []rollout.SkippedPlatform
	if *fleet && wire.ValidVersion(version) {
		o := rollout.Options{Version: version, SkipPlatforms: skip, SkipOldHosts: skipOld}
		if skipped, err = rollout.FleetGate(ctx, c.JS, names, o); err != nil {
			if _, refused := errors.AsType[*rollout.PlatformError](err); refused {
				return fmt.Errorf("no target was set: %w", err)
			}
			return err
		}
	}
	set, err := publish.Target(ctx, c.JS, names, version, nodes, *fleet, signer)
	if len(set) > 0 && len(skipped) > 0 {
		s.println("left out by platform: " + rollout.SkippedText(skipped) + "; they keep what they run, their hosts refusing the fleet target by name")
	}
	if len(set) > 0 {
		s.println(targetLine(version, set, never))
	}
	return err
}

// targetLine says what was set: `target v1.1.0 set for web-01 (revision 7), web-02 (revision 8),
// signed by key 0123456789abcdef, valid until 2026-12-06T12:00:00Z`.
func targetLine(version string, set []publish.Set, never []string) string {
	signed := fmt.Sprintf(", signed by key %s, valid until %s", set[0].Target.KeyID, set[0].Target.Expires)
	if set[0].Target.Urgent {
		signed += "; urgent: nodes do not wait for their maintenance windows"
	}
	if len(set) == 1 && set[0].Key == wire.FleetTargetKey {
		return fmt.Sprintf("target %s set for the fleet (revision %d): every node without its own target runs it%s", version, set[0].Revision, signed)
	}
	pre := make(map[string]bool, len(never))
	for _, node := range never {
		pre[node] = true
	}
	parts := make([]string, len(set))
	for i, t := range set {
		node := strings.TrimPrefix(t.Key, wire.NodeTargetKey(""))
		parts[i] = fmt.Sprintf("%s (revision %d)", node, t.Revision)
		if pre[node] {
			parts[i] = fmt.Sprintf("%s (revision %d; pre-declared: it has not heartbeated yet)", node, t.Revision)
		}
	}
	return fmt.Sprintf("target %s set for %s%s", version, strings.Join(parts, ", "), signed)
}

// keyFlags are --key (else $MESH_RELEASE_KEY), repeatable for a root whose targets role needs
// two signatures or more (decision 0045), and, for a command that signs targets, --target-ttl.
type keyFlags struct {
	paths  listFlag
	ttl    time.Duration
	getenv func(string) string
}

// keyUsage is --key's usage for the commands that sign what hosts obey.
const keyUsage = "the target key `FILE` that signs what hosts obey: release.key from `mesh-release keygen`, or a separate key the hosts trust as a target key (required; default $" + envReleaseKey +
	"); repeat it for a root whose targets role needs two signatures or more: each key signs"

func (k *keyFlags) register(fs *flag.FlagSet, ttl bool, getenv func(string) string) {
	k.getenv = getenv
	fs.Var(&k.paths, "key", keyUsage)
	if ttl {
		fs.DurationVar(&k.ttl, "target-ttl", targets.DefaultTTL, "how long a target stays valid unless signed again; a host does not act on an expired one")
	}
}

// file is the first --key, else $MESH_RELEASE_KEY, and which of them it is ("" when neither is
// set).
func (k *keyFlags) file() (path, from string) {
	first := ""
	if len(k.paths) > 0 {
		first = k.paths[0]
	}
	return keyPathFrom(first, k.getenv)
}

// more loads the keys of --key given after the first.
func (k *keyFlags) more() ([]ed25519.PrivateKey, error) {
	var out []ed25519.PrivateKey
	for i, p := range k.paths[min(len(k.paths), 1):] {
		key, err := build.LoadKey(p)
		if err != nil {
			return nil, fmt.Errorf("--key %d (%s): %w", i+2, p, err)
		}
		out = append(out, key)
	}
	return out, nil
}

// keyPathFrom is flagValue with the flag's name, else $MESH_RELEASE_KEY's value with its.
func keyPathFrom(flagValue string, getenv func(string) string) (path, from string) {
	if flagValue != "" {
		return flagValue, "--key"
	}
	if getenv != nil {
		if v := getenv(envReleaseKey); v != "" {
			return v, "$" + envReleaseKey
		}
	}
	return "", ""
}

// key loads --key; a missing --key is said in one line, with why it is needed.
func (k *keyFlags) key() (ed25519.PrivateKey, error) {
	path, from := k.file()
	if path == "" {
		return nil, missingError{"--key FILE is required: hosts obey only what a key they trust signed (decision 0011); give the release key (release.key from `mesh-release keygen`) or a target key the hosts trust, or set " + envReleaseKey}
	}
	key, err := build.LoadKey(path)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", from, err)
	}
	return key, nil
}

// signer loads --key and checks --target-ttl.
func (k *keyFlags) signer() (targets.Signer, error) {
	if err := targets.ValidTTL(k.ttl); err != nil {
		return targets.Signer{}, usageError{err.Error()}
	}
	key, err := k.key()
	if err != nil {
		return targets.Signer{}, err
	}
	more, err := k.more()
	if err != nil {
		return targets.Signer{}, err
	}
	s, err := targets.NewSigner(key, k.ttl)
	if err != nil {
		return targets.Signer{}, err
	}
	s.More = more
	if err := s.Check(); err != nil {
		return targets.Signer{}, usageError{err.Error()}
	}
	return s, nil
}
