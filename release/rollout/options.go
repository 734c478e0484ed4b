package rollout

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/novox/mesh-host/wire"
)

// WithDefaults returns o with every unset field at its default: policy canary, 2 canaries,
// DefaultSteps, and the default window, soak, alive and silent-after.
func (o Options) WithDefaults() Options {
	if o.Policy == "" {
		o.Policy = PolicyCanary
	}
	if o.Canary == 0 {
		o.Canary = DefaultCanary
	}
	if len(o.Steps) == 0 {
		o.Steps = slices.Clone(DefaultSteps)
	}
	if o.Window == 0 {
		o.Window = DefaultWindow
	}
	if o.Soak == 0 {
		o.Soak = DefaultSoak
	}
	if o.Alive == 0 {
		o.Alive = DefaultAlive
	}
	if o.SilentAfter == 0 {
		o.SilentAfter = DefaultSilentAfter
	}
	return o
}

// Validate checks o as WithDefaults would complete it, and names the flag at fault.
func (o Options) Validate() error {
	o = o.WithDefaults()
	if !wire.ValidVersion(o.Version) {
		return fmt.Errorf("version %q is not %s", o.Version, wire.VersionRule)
	}
	switch o.Policy {
	case PolicyCanary, PolicyImmediate:
	default:
		return fmt.Errorf("--policy %q: want canary or immediate", o.Policy)
	}
	if o.Canary < 0 {
		return fmt.Errorf("--canary %d: want at least 1", o.Canary)
	}
	seen := make(map[string]bool, len(o.CanaryNodes))
	for _, n := range o.CanaryNodes {
		if err := wire.ValidNode(n); err != nil {
			return fmt.Errorf("--canary-nodes: %w", err)
		}
		if seen[n] {
			return fmt.Errorf("--canary-nodes: %s is named twice", n)
		}
		seen[n] = true
	}
	skip := make(map[string]bool, len(o.SkipPlatforms))
	for _, p := range o.SkipPlatforms {
		pp, err := wire.ParsePlatform(p)
		if err != nil {
			return fmt.Errorf("--skip-platform: %w", err)
		}
		if skip[pp.String()] {
			return fmt.Errorf("--skip-platform: %s is named twice", pp)
		}
		skip[pp.String()] = true
	}
	if o.Salt != "" && wire.ValidPlanSalt(o.Salt) != nil {
		return fmt.Errorf("--salt %q: %w", text(o.Salt), wire.ValidPlanSalt(o.Salt))
	}
	if err := validSteps(o.Steps); err != nil {
		return err
	}
	for _, d := range []struct {
		flag string
		d    time.Duration
	}{{"--window", o.Window}, {"--soak", o.Soak}, {"--alive", o.Alive}, {"--silent-after", o.SilentAfter}} {
		if d.d < 0 {
			return fmt.Errorf("%s %s: want a positive duration", d.flag, d.d)
		}
	}
	if o.Window < time.Second {
		return fmt.Errorf("--window %s: want at least 1s (a node needs time to fetch and confirm)", o.Window)
	}
	if o.Soak < time.Second {
		// uptime_s counts whole seconds: a shorter soak could not be told from none.
		return fmt.Errorf("--soak %s: want at least 1s (a node's uptime counts whole seconds)", o.Soak)
	}
	return nil
}

func validSteps(steps []int) error {
	prev := 0
	for _, p := range steps {
		if p < 1 || p > 100 {
			return fmt.Errorf("--steps %s: %d%% is not between 1%% and 100%%", stepsText(steps), p)
		}
		if p <= prev {
			return fmt.Errorf("--steps %s: the shares are cumulative and must grow (%d%% after %d%%)", stepsText(steps), p, prev)
		}
		prev = p
	}
	if prev != 100 {
		return fmt.Errorf("--steps %s: the last step must be 100%% (the whole fleet)", stepsText(steps))
	}
	return nil
}

func stepsText(steps []int) string {
	parts := make([]string, len(steps))
	for i, p := range steps {
		parts[i] = fmt.Sprintf("%d%%", p)
	}
	return strings.Join(parts, ",")
}

// rolloutID is "<UTC yyyymmddThhmmssZ>-<version>", with every character a KV key may not hold
// replaced by '_' (a valid version has none, but the id must be a key whatever it is given).
func rolloutID(at time.Time, version string) string {
	b := []byte(at.UTC().Format("20060102T150405Z") + "-" + version)
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '/', c == '_', c == '=', c == '.':
		default:
			b[i] = '_'
		}
	}
	return string(b)
}

// idPrefixLen is the length of the time part of an id and its '-'.
const idPrefixLen = len("20060102T150405Z-")

// versionOfID is the version part of a rollout id.
func versionOfID(id string) string {
	if len(id) <= idPrefixLen {
		return ""
	}
	return id[idPrefixLen:]
}
