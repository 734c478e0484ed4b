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
	rollout.WhyRestarted, rollout.WhyRefused, rollout.WhyNotConfirmed, "other", "unlisted"}

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
