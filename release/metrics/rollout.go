package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/fleet"
	"github.com/novox/mesh-host/release/rollout"
	"github.com/novox/mesh-host/wire"
)

// haltReasons are the values the reason label of mesh_rollout_halt_nodes takes: the reasons a
// rollout halts for (rollout.Why*), "other" for one a newer controller wrote, and "unlisted"
// for the nodes a halt report counts beyond the ones it names (rollout.MaxHaltNodes).
var haltReasons = []string{rollout.WhySilent, rollout.WhyRolledBack, rollout.WhyLauncherRolledBack,
	rollout.WhyRestarted, rollout.WhyRefused, rollout.WhyNotConfirmed, rollout.WhyTrustExpired, "other", "unlisted"}

// collectRollout says the current rollout: what it is, its batch, how many of its nodes the
// last heartbeats show confirmed and soaked, and why it halted. Confirmed and soaked are judged
// from each node's last heartbeat as the controller judges them (running the version as
// known-good; up for the soak since, or its batch done): the controller's own judgement, with
// its history, is `mesh-release rollout status`. Without heartbeats (judged false), the counts
// judged from them are left out.
func collectRollout(ch chan<- prometheus.Metric, st rollout.State, rows []fleet.Row, judged bool, now time.Time) {
	ch <- gauge(descRolloutInfo, 1, text.Cut(text.Printable(st.ID), 64), versionLabel(st.Version), statusLabel(st.Status))
	ch <- gauge(descRolloutBatch, float64(min(st.Current+1, len(st.Batches))))
	ch <- gauge(descRolloutBatches, float64(len(st.Batches)))
	ch <- gauge(descRolloutCreated, float64(st.Created.UnixMilli())/1000)
	ch <- gauge(descRolloutHalted, b2f(st.Status == rollout.StatusHalted))
	ch <- gauge(descRolloutPaused, b2f(st.Paused(now)))
	byNode := make(map[string]*wire.Heartbeat, len(rows))
	for i := range rows {
		if rows[i].Heartbeat != nil && !rows[i].Silent {
			byNode[rows[i].Node] = rows[i].Heartbeat
		}
	}
	soak := int64(st.SoakS)
	labels := platformLabels(st)
	var byPlatform map[string]*platformCounts
	if len(labels) > 0 {
		byPlatform = make(map[string]*platformCounts, len(labels)+1)
		for _, p := range labels {
			byPlatform[p] = &platformCounts{}
		}
	}
	var confirmed, soaked, batchConfirmed, batchSoaked int
	for i := range st.Batches {
		if i > st.Current {
			break
		}
		done := !st.Batches[i].Done.IsZero()
		for _, node := range st.BatchNodes(i) {
			hb, ok := byNode[node]
			c := ok && hb.State == wire.StateRunning && hb.Running == st.Version && hb.KnownGood == st.Version
			s := c && (done || hb.UptimeS >= soak)
			confirmed, soaked = confirmed+b2i(c), soaked+b2i(s)
			if byPlatform != nil && ok {
				pc := byPlatform[labelIn(rollout.PlatformLabel(*hb), byPlatform)]
				pc.confirmed, pc.soaked = pc.confirmed+b2i(c), pc.soaked+b2i(s)
			}
			if i == st.Current {
				batchConfirmed, batchSoaked = batchConfirmed+b2i(c), batchSoaked+b2i(s)
			}
		}
	}
	ch <- gauge(descRolloutNodes, float64(len(st.Nodes)))
	ch <- gauge(descRolloutLeftOut, float64(len(st.LeftOut)+st.LeftOutMore))
	ch <- gauge(descBatchNodes, float64(len(st.BatchNodes(st.Current))))
	if judged {
		ch <- gauge(descRolloutConfirmed, float64(confirmed))
		ch <- gauge(descRolloutSoaked, float64(soaked))
		ch <- gauge(descBatchConfirmed, float64(batchConfirmed))
		ch <- gauge(descBatchSoaked, float64(batchSoaked))
	}
	collectRolloutPlatforms(ch, st, byPlatform, judged)
	why := make(map[string]int, len(haltReasons))
	if h := st.Halt; h != nil {
		for _, r := range h.Nodes {
			why[reasonLabel(r.Why)]++
		}
		why["unlisted"] += h.More // counted, not named: their reasons are not stored
	}
	for _, r := range haltReasons {
		ch <- gauge(descRolloutHaltNodes, float64(why[r]), r)
	}
}

func reasonLabel(why string) string {
	for _, r := range haltReasons[:len(haltReasons)-1] {
		if r == why {
			return r
		}
	}
	return "other"
}

func statusLabel(s rollout.Status) string {
	switch s {
	case rollout.StatusRunning, rollout.StatusCompleted, rollout.StatusHalted, rollout.StatusAborted, rollout.StatusSuperseded:
		return string(s)
	}
	return "other"
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// maxPlatformLabels bounds the values of the platform label: the platforms a manifest may list
// (wire.MaxPlatforms), then "other".
const maxPlatformLabels = wire.MaxPlatforms

// platformOther is the platform label of what is past maxPlatformLabels, or of a node whose
// heartbeat names a platform the rollout does not.
const platformOther = "other"

// platformCounts is one platform's part of the current rollout.
type platformCounts struct{ nodes, confirmed, soaked, halt, skipped int }

// platformLabels are the values of the platform label for st: the platforms it names
// (rollout.State.Platforms), at most maxPlatformLabels, and "other" past them; none for a
// rollout whose nodes said no platform.
func platformLabels(st rollout.State) []string {
	ps := st.Platforms()
	if len(ps) == 0 {
		return nil
	}
	out := make([]string, 0, min(len(ps), maxPlatformLabels)+1)
	for _, p := range ps[:min(len(ps), maxPlatformLabels)] {
		out = append(out, text.Cut(text.Printable(p), 64))
	}
	return append(out, platformOther)
}

// labelIn is p when it is a label of by, else "other".
func labelIn(p string, by map[string]*platformCounts) string {
	if _, ok := by[p]; ok {
		return p
	}
	return platformOther
}

// collectRolloutPlatforms says the current rollout by platform: its nodes (as planned), the confirmed
// and soaked among them (judged: from heartbeats, as the totals), the troubled ones of its halt,
// and those it left out by platform.
func collectRolloutPlatforms(ch chan<- prometheus.Metric, st rollout.State, by map[string]*platformCounts, judged bool) {
	if by == nil {
		return
	}
	for _, b := range st.Batches {
		for _, c := range b.Platforms {
			by[labelIn(c.Platform, by)].nodes += c.Nodes
		}
	}
	for _, s := range st.Skipped {
		by[labelIn(s.Platform, by)].skipped += s.Nodes
	}
	if h := st.Halt; h != nil {
		for _, o := range h.Platforms {
			by[labelIn(o.Platform, by)].halt += o.Troubled
		}
	}
	for p, c := range by {
		ch <- gauge(descPlatformNodes, float64(c.nodes), p)
		ch <- gauge(descPlatformSkipped, float64(c.skipped), p)
		ch <- gauge(descPlatformHalt, float64(c.halt), p)
		if judged {
			ch <- gauge(descPlatformConfirmed, float64(c.confirmed), p)
			ch <- gauge(descPlatformSoaked, float64(c.soaked), p)
		}
	}
}
