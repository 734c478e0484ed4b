package rollout

import (
	"bytes"
	"encoding/json"
	"fmt"
	txt "github.com/novox/mesh-host/internal/text"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"
)

// at is a time on the day the samples happen, in UTC.
func at(h, m, s int) time.Time { return time.Date(2026, 11, 29, h, m, s, 0, time.UTC) }

// sampleHalted is a rollout of v1.2.0 over 6 nodes halted in its canary batch at 13:15:02.
func sampleHalted() State {
	return State{
		Schema: Schema, ID: "20261129T131200Z-v1.2.0", Version: "v1.2.0", Policy: PolicyCanary, Status: StatusHalted,
		Created: at(13, 12, 0), Updated: at(13, 15, 2), Ended: at(13, 15, 2),
		Canary: 2, Steps: []int{10, 50, 100}, WindowS: 600, SoakS: 120, AliveS: 600, SilentAfterS: 90,
		Nodes:   []string{"node-a", "node-b", "node-c", "node-d", "node-e", "node-f"},
		Ran:     []string{"v1.1.0", "v1.1.0", "v1.1.0", "v1.1.0", "v1.1.0", "v1.0.0"},
		Batches: []Batch{{Name: "canary", End: 2, Started: at(13, 12, 1)}, {Name: "50%", End: 3}, {Name: "100%", End: 6}},
		LeftOut: []LeftOut{{Node: "node-x", Batch: 0, SilentSince: at(13, 5, 0)}},
		Halt: &Halt{At: at(13, 15, 2), Batch: 0, Nodes: []NodeReason{
			{Node: "node-a", Why: WhyRolledBack, Since: at(13, 15, 1), Detail: "rolled back from v1.2.0 to v1.1.0 at 13:15:01: exited 3 times within 10s (exit status 2)",
				Output: "starting\npanic: nil map\n\ngoroutine 1 [running]:\nmain.main()\n"},
			{Node: "node-b", Why: WhySilent, Since: at(13, 4, 0), Detail: "unheard for 11m, longer than the window 10m; its last word at 13:04:00: state running, running v1.1.0"},
		}},
		Restored: true,
	}
}

// sampleRunning is a rollout of v1.2.0 over 30 nodes in its second batch, held by a
// controller whose lease runs until 13:16:20.
func sampleRunning() State {
	nodes := make([]string, 30)
	ran := make([]string, 30)
	for i := range nodes {
		nodes[i], ran[i] = fmt.Sprintf("n%02d", i), "v1.1.0"
	}
	return State{
		Schema: Schema, ID: "20261129T131200Z-v1.2.0", Version: "v1.2.0", Policy: PolicyCanary, Status: StatusRunning,
		Created: at(13, 12, 0), Updated: at(13, 15, 0),
		Canary: 2, CanaryNodes: []string{"n00", "n01"}, Steps: []int{50, 100}, WindowS: 600, SoakS: 120, AliveS: 600, SilentAfterS: 90,
		Nodes: nodes, Ran: ran, Current: 1,
		Batches: []Batch{{Name: "canary", End: 2, Started: at(13, 12, 1), Done: at(13, 14, 30)},
			{Name: "50%", End: 15, Started: at(13, 14, 30)}, {Name: "100%", End: 30}},
		Holder: &Holder{ID: "build-01 pid 4242", Host: "build-01", PID: 4242, Since: at(13, 12, 0), Until: at(13, 16, 20)},
	}
}

func TestWriteStatusSaysWhyAHaltedRolloutStoppedNodeByNode(t *testing.T) {
	var b bytes.Buffer
	if err := WriteStatus(&b, sampleHalted(), at(13, 16, 0)); err != nil {
		t.Fatal(err)
	}
	want := `rollout 20261129T131200Z-v1.2.0
  version  v1.2.0
  policy   canary: 2 canaries, then 10%,50%,100% of the fleet
  status   HALTED in batch 1/3 (canary) at 13:15:02
  created  2026-11-29 13:12:00 UTC (4m ago)
  updated  2026-11-29 13:15:02 UTC (58s ago)
  ended    2026-11-29 13:15:02 UTC (58s ago)
  options  window 10m, soak 2m, alive 10m, silent after 1m30s
  fleet    6 nodes in 3 batches, 1 left out
  targets  batch 1/3 (canary) set back to the version each node ran

batches
  1/3  canary  2 nodes  HALTED 13:15:02  node-a, node-b
  2/3  50%     1 node   not reached      node-c
  3/3  100%    3 nodes  not reached      node-d, node-e, node-f

left out (silent when their batch began; they take the fleet target when it is set)
  node-x  batch 1/3 (canary)  silent since 13:05:00 (11m ago)

halted at 13:15:02 in batch 1/3 (canary): 2 nodes showed trouble
  node-a: rolled back from v1.2.0 to v1.1.0 at 13:15:01: exited 3 times within 10s (exit status 2)
      | starting
      | panic: nil map
      | goroutine 1 [running]:
      | main.main()
  node-b: unheard for 11m, longer than the window 10m; its last word at 13:04:00: state running, running v1.1.0
`
	if got := b.String(); got != want {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
}

// A running rollout says which batch is in progress, who drives it and until when, and lists
// at most shownNodes nodes of a batch.
func TestWriteStatusShowsTheBatchInProgressItsControllerAndBoundsEachBatchsNodes(t *testing.T) {
	var b bytes.Buffer
	if err := WriteStatus(&b, sampleRunning(), at(13, 16, 0)); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{
		"  status      running, batch 2/3 (50%)\n",
		"  controller  build-01 pid 4242, lease until 13:16:20 (in 20s)\n",
		"  policy      canary: canaries n00, n01, then 50%,100% of the fleet\n",
		"  1/3  canary  2 nodes   done 13:14:30               n00, n01\n",
		"  2/3  50%     13 nodes  in progress since 13:14:30  n02, n03,",
		"  3/3  100%    15 nodes  pending                     n15, n16, n17, n18, n19, n20, n21, n22, n23, n24, n25, n26, n27, n28, n29\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("no %q in:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ended") || strings.Contains(got, "targets") || strings.Contains(got, "halted") {
		t.Errorf("a running rollout shows an end, targets set back, or a halt:\n%s", got)
	}
	// 30 nodes in the last batch: 20 named, then a count.
	st := sampleRunning()
	st.Batches = st.Batches[:1]
	st.Batches[0].End = 30
	b.Reset()
	WriteStatus(&b, st, at(13, 16, 0))
	if !strings.Contains(b.String(), "n19, and 10 more\n") || strings.Contains(b.String(), "n20") {
		t.Errorf("30 nodes in a batch are not cut to 20 and a count:\n%s", b.String())
	}
	// Left-out nodes are listed up to shownNodes, then counted with those the state only counts.
	st = sampleRunning()
	for i := range 25 {
		st.LeftOut = append(st.LeftOut, LeftOut{Node: fmt.Sprintf("gone%02d", i), Batch: 1, SilentSince: at(13, 0, 0)})
	}
	st.LeftOutMore = 100
	b.Reset()
	WriteStatus(&b, st, at(13, 16, 0))
	if !strings.Contains(b.String(), "30 nodes in 3 batches, 125 left out\n") || !strings.Contains(b.String(), "  gone19  batch 2/3 (50%)  silent since 13:00:00 (16m ago)\n  and 105 more\n") ||
		strings.Contains(b.String(), "gone20") {
		t.Errorf("125 nodes left out, 25 of them listed in the state, are not cut to 20 and a count:\n%s", b.String())
	}
	// A lapsed lease says nobody drives it, and how to continue.
	st = sampleRunning()
	b.Reset()
	WriteStatus(&b, st, at(13, 17, 0))
	if !strings.Contains(b.String(), "  controller  none since 13:16:20 (build-01 pid 4242's lease lapsed): `mesh-release rollout resume` continues it\n") {
		t.Errorf("a lapsed lease is not said:\n%s", b.String())
	}
}

func TestSummaryIsOneLineForEveryStatus(t *testing.T) {
	now := at(13, 16, 0)
	halted1 := sampleHalted()
	halted1.Halt.Nodes = halted1.Halt.Nodes[:1]
	halted1.Restored = false
	haltedMany := sampleHalted()
	haltedMany.Halt.More = 5
	haltedLauncher := sampleHalted()
	haltedLauncher.Halt.Nodes = []NodeReason{{Node: "node-a", Why: WhyLauncherRolledBack, Since: at(13, 15, 1), Detail: "launcher rolled back from v1.1.0: crashed"}}
	lapsed := sampleRunning()
	lapsed.Holder.Until = at(13, 15, 0)
	finishing := sampleRunning()
	finishing.Current = 3
	completed := sampleRunning()
	completed.Status, completed.Ended, completed.Holder = StatusCompleted, at(13, 14, 0), nil
	immediate := State{ID: "x", Version: "v1.3.0", Policy: PolicyImmediate, Status: StatusCompleted, Created: at(13, 0, 0), Ended: at(13, 0, 0), Nodes: []string{"a"}}
	aborted := sampleRunning()
	aborted.Status, aborted.AbortedBy, aborted.Ended = StatusAborted, "ann@build-01", at(13, 15, 30)
	superseded := sampleRunning()
	superseded.Status, superseded.SupersededBy, superseded.Ended = StatusSuperseded, "20261129T131500Z-v1.2.1", at(12, 1, 0).AddDate(0, 0, -1)
	for _, tc := range []struct {
		name string
		st   State
		want string
	}{
		{"Running", sampleRunning(), "rollout v1.2.0 (20261129T131200Z-v1.2.0): running, batch 2/3 (50%), started 4m ago"},
		{"NoController", lapsed, "rollout v1.2.0 (20261129T131200Z-v1.2.0): paused, batch 2/3 (50%), started 4m ago; no controller drives it (`mesh-release rollout resume` continues it)"},
		{"Finishing", finishing, "rollout v1.2.0 (20261129T131200Z-v1.2.0): running, every batch done, setting the fleet target, started 4m ago"},
		{"HaltedOneNode", halted1, "rollout v1.2.0: HALTED in batch 1/3 (canary) at 13:15 — node-a rolled back; targets not yet set back (`mesh-release rollout status`)"},
		{"HaltedByALauncher", haltedLauncher, "rollout v1.2.0: HALTED in batch 1/3 (canary) at 13:15 — node-a launcher rolled back (`mesh-release rollout status`)"},
		{"HaltedManyNodes", haltedMany, "rollout v1.2.0: HALTED in batch 1/3 (canary) at 13:15 — 7 nodes showed trouble (`mesh-release rollout status`)"},
		{"Completed", completed, "rollout v1.2.0: completed 2m ago, 30 nodes"},
		{"Immediate", immediate, "rollout v1.3.0: set as the fleet target at once (policy immediate) 16m ago"},
		{"Aborted", aborted, "rollout v1.2.0: aborted by ann@build-01 in batch 2/3 (50%) at 13:15"},
		{"SupersededYesterday", superseded, "rollout v1.2.0: superseded by 20261129T131500Z-v1.2.1 at 2026-11-28 12:01"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Summary(tc.st, now); got != tc.want {
				t.Errorf("got  %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestWriteEventIsTheTimeAndMessageAndAHaltNamesEachNodeAndWhy(t *testing.T) {
	st := sampleHalted()
	for _, tc := range []struct {
		name string
		e    Event
		want string
	}{
		{"Milestone", Event{Time: at(13, 12, 1), Kind: EventBatch, Message: "batch 1/3 (canary): targets set for node-a, node-b"},
			"13:12:01 batch 1/3 (canary): targets set for node-a, node-b\n"},
		{"NoMessage", Event{Time: at(13, 12, 1), Kind: EventResumed, Rollout: "r1"}, "13:12:01 resumed r1\n"},
		{"Halted", Event{Time: at(13, 15, 2), Kind: EventHalted, Message: "halted in batch 1/3 (canary): 2 nodes showed trouble", Reasons: st.Halt.Nodes},
			"13:15:02 halted in batch 1/3 (canary): 2 nodes showed trouble\n" +
				"  node-a: rolled back from v1.2.0 to v1.1.0 at 13:15:01: exited 3 times within 10s (exit status 2)\n" +
				"      | starting\n      | panic: nil map\n      | goroutine 1 [running]:\n      | main.main()\n" +
				"  node-b: unheard for 11m, longer than the window 10m; its last word at 13:04:00: state running, running v1.1.0\n"},
		{"WithoutDetail", Event{Time: at(13, 15, 2), Kind: EventHalted, Message: "halted", Reasons: []NodeReason{
			{Node: "a", Why: WhyRestarted}, {Node: "b", Why: WhyRefused}, {Node: "c", Why: WhyNotConfirmed},
			{Node: "d", Why: WhySilent, Since: at(13, 1, 0)}, {Node: "e", Why: WhyRolledBack, Since: at(12, 0, 0).AddDate(0, 0, -1)}, {Node: "f", Why: "new-reason"},
			{Node: "g", Why: WhyLauncherRolledBack, Since: at(13, 14, 0)}}},
			"13:15:02 halted\n  a: restarted after confirming\n  b: refused the version\n  c: not confirmed within the window\n" +
				"  d: silent since 13:01:00\n  e: rolled back at 2026-11-28 12:00:00\n  f: new-reason\n  g: launcher rolled back at 13:14:00\n"},
		{"HaltedByALauncherRollback", Event{Time: at(13, 15, 2), Kind: EventHalted, Message: "halted", Reasons: []NodeReason{
			{Node: "node-a", Why: WhyLauncherRolledBack, Since: at(13, 15, 1), Detail: "launcher rolled back from v1.1.0: exited with status 2 before confirming"}}},
			"13:15:02 halted\n  node-a: launcher rolled back from v1.1.0: exited with status 2 before confirming\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := WriteEvent(&b, tc.e); err != nil {
				t.Fatal(err)
			}
			if b.String() != tc.want {
				t.Errorf("got:\n%s\nwant:\n%s", b.String(), tc.want)
			}
		})
	}
}

// Everything in an event or a state may have come from a heartbeat: nothing that could drive a
// terminal is written raw, each line stays bounded, and a long output shows only its tail.
func TestRenderersWriteNoControlCharactersAndBoundEveryLine(t *testing.T) {
	evil := "node\x1b[2J\r\u009b31m\u202eevil\x7f" + strings.Repeat("x", 5000)
	var out strings.Builder
	for i := range 50 {
		fmt.Fprintf(&out, "line %d \x1b[31mred\x1b[0m %s\n", i, strings.Repeat("y", 500))
	}
	reasons := []NodeReason{{Node: evil, Why: evil, Detail: evil + "\nsecond line", Output: out.String()}}
	st := sampleHalted()
	st.ID, st.Version, st.Nodes[0], st.Batches[0].Name, st.AbortedBy = evil, evil, evil, evil, evil
	st.Halt.Nodes = reasons
	st.LeftOut[0].Node = evil
	e := Event{Time: at(13, 0, 0), Kind: EventHalted, Message: evil + "\nmore", Reasons: reasons, Node: evil}

	var text bytes.Buffer
	WriteEvent(&text, e)
	WriteStatus(&text, st, at(13, 16, 0))
	sum := Summary(st, at(13, 16, 0))
	if len(sum) > MaxSummaryBytes {
		t.Errorf("a summary of %d bytes", len(sum))
	}
	text.WriteString(sum + "\n")
	for _, l := range strings.Split(strings.TrimSuffix(text.String(), "\n"), "\n") {
		if txt.Printable(l) != l {
			t.Fatalf("a line carries a control character: %q", l)
		}
		if len(l) > maxLineText+100 {
			t.Errorf("a line of %d bytes: %.100q…", len(l), l)
		}
	}
	if n := strings.Count(text.String(), "| line "); n != 2*maxOutputLines {
		t.Errorf("%d output lines shown for two reports; want the last %d each", n, maxOutputLines)
	}
	if !strings.Contains(text.String(), "| line 49 ") || strings.Contains(text.String(), "| line 39 ") {
		t.Errorf("the output shown is not its tail")
	}

	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return WriteEventJSON(b, e) },
		func(b *bytes.Buffer) error { return WriteStatusJSON(b, st) },
	} {
		var b bytes.Buffer
		if err := write(&b); err != nil {
			t.Fatal(err)
		}
		for _, r := range strings.TrimSuffix(b.String(), "\n") {
			if r != '\n' && txt.Printable(string(r)) != string(r) {
				t.Fatalf("JSON carries %U raw", r)
			}
		}
		if !utf8.Valid(b.Bytes()) {
			t.Error("JSON is not valid UTF-8")
		}
	}
	// The escaping changes nothing a machine reads.
	var line bytes.Buffer
	WriteEventJSON(&line, e)
	if strings.Count(line.String(), "\n") != 1 {
		t.Errorf("an event is not one line")
	}
	var back Event
	if err := json.Unmarshal(line.Bytes(), &back); err != nil || !reflect.DeepEqual(back, e) {
		t.Errorf("the event does not read back: %v\n%+v\n%+v", err, back, e)
	}
	var sb bytes.Buffer
	WriteStatusJSON(&sb, st)
	var stBack State
	if err := json.Unmarshal(sb.Bytes(), &stBack); err != nil || !reflect.DeepEqual(stBack, st) {
		t.Errorf("the state does not read back: %v", err)
	}
}
