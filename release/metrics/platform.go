package metrics

import (
	"regexp"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/novox/mesh-host/release/fleet"
)

// MaxPlatforms bounds the values the platform label takes in one scrape, as MaxVersions bounds
// a version label: the platforms with the most nodes keep their own series, the rest are summed
// under "other". A fleet runs a few; the bound is for what a heartbeat may claim.
const MaxPlatforms = 16

// Label values for what a platform label cannot say as a platform.
const (
	platformUnknown = "unknown" // the heartbeat has no profile to say it
	platformInvalid = "invalid" // the heartbeat's text is not a platform
)

var descNodesPlatform = prometheus.NewDesc("mesh_fleet_nodes_by_platform",
	"Nodes by the platform their last heartbeat says they run (linux/arm64).", []string{"platform"}, nil)

// platformWord is one part of a platform as a label takes it: Go's and OCI's os, arch and
// variant words are short, lower case letters and digits.
var platformWord = regexp.MustCompile(`^[a-z0-9]{1,20}$`)

// platformLabel is a row's platform as a label value: os/arch or os/arch/variant as the node
// said it (an older host's arm taken as linux/arm/v7), else unknown or invalid.
func platformLabel(p string) string {
	if p == "" {
		return platformUnknown
	}
	parts := strings.Split(p, "/")
	if len(parts) < 2 || len(parts) > 3 {
		return platformInvalid
	}
	for _, w := range parts {
		if !platformWord.MatchString(w) {
			return platformInvalid
		}
	}
	return p
}

// collectPlatforms counts rows by platform, at most MaxPlatforms values.
func collectPlatforms(ch chan<- prometheus.Metric, rows []fleet.Row) {
	c := map[string]int{}
	for _, r := range rows {
		c[platformLabel(r.Platform)]++
	}
	for p, n := range boundCounts(c, MaxPlatforms) {
		ch <- gauge(descNodesPlatform, float64(n), p)
	}
}
