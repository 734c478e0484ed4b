package rollout

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// PreviewOn is Controller.Preview for a tool that writes nothing and so holds no key: `rollout
// plan`.
func PreviewOn(ctx context.Context, js jetstream.JetStream, n wire.Names, o Options) (State, error) {
	c := &Controller{cfg: Config{JS: js, Names: n}.withDefaults(), log: discard(nil), host: "preview"}
	return c.Preview(ctx, o)
}

// WritePlan writes which nodes each batch of st holds, as `rollout plan` and `rollout start`
// print it: the plan's salt and waves, each batch with its plan In, its share, its nodes (the
// first 20 named), and the nodes given a target of their own because their hosts do not read
// plans.
func WritePlan(w io.Writer, st State) error {
	var b strings.Builder
	switch {
	case len(st.Batches) == 0:
		fmt.Fprintf(&b, "plan of %s: no batch (%s)\n", oneLine(st.Version, maxIDText), fleetWords(st))
	case st.Plan == nil:
		fmt.Fprintf(&b, "plan of %s: %s; no node reads rollout plans, so each is given a target of its own when its batch begins\n",
			oneLine(st.Version, maxIDText), fleetWords(st))
	default:
		fmt.Fprintf(&b, "plan of %s: %s; salt %s, waves %s (a node is in a wave when its bucket, docs/wire.md \"Rollout plan\", is below it)\n",
			oneLine(st.Version, maxIDText), fleetWords(st), st.Plan.Salt, wavesText(st.Plan.Waves))
	}
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	for i, bt := range st.Batches {
		nodes := st.BatchNodes(i)
		in := "-"
		if st.Plan != nil {
			in = fmt.Sprintf("plan in %d", bt.In)
		}
		fmt.Fprintf(tw, "  %d/%d\t%s\t%s\t%s\t%s\n", i+1, len(st.Batches), oneLine(bt.Name, maxIDText), in,
			countOf(len(nodes), "node", "nodes"), shownList(nodes))
	}
	tw.Flush()
	if st.Plan != nil {
		if old := st.perNodeNodes(); len(old) > 0 {
			fmt.Fprintf(&b, "  per-node targets: %s not taking the plan (a host from before plans, or a target of its own): %s\n", countOf(len(old), "node", "nodes"), shownList(old))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// wavesText is waves as percentages: "1%, 10%, 50%, 100%".
func wavesText(waves []uint32) string {
	parts := make([]string, len(waves))
	for i, w := range waves {
		parts[i] = strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.4f", float64(w)*100/wire.PlanScale), "0"), ".") + "%"
	}
	return strings.Join(parts, ", ")
}
