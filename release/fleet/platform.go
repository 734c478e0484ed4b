package fleet

import (
	"fmt"
	"sort"
	"strings"

	"github.com/novox/mesh-host/wire"
)

// platformOf is a node's platform as its heartbeat says it (wire.ProfilePlatform), "" when it
// has no profile to say it. A host older than platforms sends only os and arch: its arm is taken
// as linux/arm/v7, as the rollout's gate takes it, so that `fleet` and a refusal name one thing;
// the node's story says where the variant came from.
func platformOf(p *wire.Profile) string {
	if p == nil {
		return ""
	}
	pl := wire.ProfilePlatform(*p)
	if pl.IsZero() {
		return ""
	}
	return pl.String()
}

// saysPlatform reports whether p names its platform itself (hosts since manifest schema 4).
func saysPlatform(p *wire.Profile) bool {
	_, err := wire.ParsePlatform(p.Platform)
	return err == nil
}

// platformStory is the node story's platform line: the platform, and where it came from when
// the host did not name it.
func platformStory(p *wire.Profile) string {
	pl := platformOf(p)
	switch {
	case p == nil:
		return "- (its heartbeat has no profile yet)"
	case pl == "":
		return "- (its profile names no os or arch)"
	case saysPlatform(p):
		return cell(pl, maxIDCell)
	}
	why := " (from its os and arch: its host names no platform)"
	if p.Arch == "arm" {
		why = " (from its os and arch: its host names no platform, so its arm variant is taken as v7)"
	}
	return cell(pl, maxIDCell) + why
}

// PlatformCount is how many nodes run one platform, and of them how many of each STATE kind;
// Platform "" is the nodes whose heartbeat says none.
type PlatformCount struct {
	Platform string
	Nodes    int
	Kinds    map[Kind]int
}

// Trouble is what the platform's nodes are in, besides ok and the ordinary kinds, as the
// summary line words it (`1 silent, 2 rolled back`); "" when nothing is. A release that fails
// on one platform only shows there.
func (c PlatformCount) Trouble() string {
	var parts []string
	if n := c.Kinds[KindSilent]; n > 0 {
		parts = append(parts, fmt.Sprintf("%d silent", n))
	}
	for _, k := range summaryKinds {
		if n := c.Kinds[k.kind]; n > 0 && (k.kind.Trouble() || k.kind == KindUnreadable) {
			parts = append(parts, fmt.Sprintf("%d %s", n, k.word))
		}
	}
	return strings.Join(parts, ", ")
}

// PlatformsOf counts rs by platform, most nodes first (ties by name), the nodes of no known
// platform last.
func PlatformsOf(rs []Row) []PlatformCount {
	m := make(map[string]*PlatformCount)
	for _, r := range rs {
		c := m[r.Platform]
		if c == nil {
			c = &PlatformCount{Platform: r.Platform, Kinds: make(map[Kind]int)}
			m[r.Platform] = c
		}
		c.Nodes++
		c.Kinds[r.StatusKind]++
	}
	out := make([]PlatformCount, 0, len(m))
	for _, c := range m {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if (a.Platform == "") != (b.Platform == "") {
			return b.Platform == ""
		}
		if a.Nodes != b.Nodes {
			return a.Nodes > b.Nodes
		}
		return a.Platform < b.Platform
	})
	return out
}

// shownPlatforms is how many platforms the line under the table names.
const shownPlatforms = 8

// platformsLine is `by platform: 4 linux/amd64, 2 linux/arm64 (1 rolled back), 1 unknown`, said
// when the fleet runs more than one platform (or some nodes say none); "" otherwise, where the
// column says it.
// A platform is the node's word: bounded, and at most shownPlatforms named.
func platformsLine(rs []Row) string {
	counts := PlatformsOf(rs)
	if len(counts) < 2 {
		return ""
	}
	parts := make([]string, 0, min(len(counts), shownPlatforms)+1)
	for i, c := range counts {
		if i == shownPlatforms {
			parts = append(parts, fmt.Sprintf("and %d more platforms", len(counts)-i))
			break
		}
		name := cell(c.Platform, maxIDCell)
		if name == "" {
			name = "unknown"
		}
		part := fmt.Sprintf("%d %s", c.Nodes, name)
		if t := c.Trouble(); t != "" {
			part += " (" + t + ")"
		}
		parts = append(parts, part)
	}
	return cell("by platform: "+strings.Join(parts, ", "), maxHeaderCell)
}
