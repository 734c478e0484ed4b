package lab

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/rollout"
)

// BenchmarkSixNodeRollout is the figure "the good rollout across six process nodes: total time
// minus the configured waits (controller overhead)". Six nodes, each a real mesh-launcher process
// with its own root, heartbeating and reconciling every second; one op is one rollout of a new
// real-host version, built and published before the clock starts, driven by `mesh-release
// rollout start vX --canary 2 --steps 50%,100% --window 60s --soak 3s --json --follow` (a child
// process) from its start to its exit 0:
//
//	go test -run '^$' -bench SixNodeRollout -benchtime 3x ./lab
//
// total-s is that wall time; waits-s the soak every batch must wait and no controller can avoid
// (batches × --soak, from the options); overhead-s the rest. Of the overhead, confirm-s is the
// nodes' part — from a batch's targets being set to its last node confirming: fetch, verify,
// preflight, stand aside, start, first reconcile — and the remainder is seeing the soak through
// whole-second uptimes on 1s heartbeats, plus the controller's own work. controller-cpu-s is the
// controller's user+system CPU (wait4's rusage, exact), controller-peak-rss-MB its VmHWM read from
// /proc just before it exits.
func BenchmarkSixNodeRollout(b *testing.B) {
	const soak = 3 * time.Second
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sctx, scancel := context.WithTimeout(ctx, 3*time.Minute)
	defer scancel()
	f, err := StartFleet(sctx, FleetOptions{Dir: b.TempDir(), Builder: bins, Nodes: 6})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()

	var total, waits, confirm, cpu time.Duration
	var peakKB int64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		version := fmt.Sprintf("v1.%d.0", i+1)
		if err := f.Ship(ctx, version, PkgHost); err != nil {
			b.Fatal(err)
		}
		c := f.Rollout("start", version, "--canary", "2", "--steps", "50%,100%", "--window", "60s", "--soak", soak.String(), "--json", "--follow")
		b.StartTimer()
		began := time.Now()
		if err := c.Start(); err != nil {
			b.Fatal(err)
		}
		// Sample the controller's peak memory from /proc while it runs.
		for exited, _ := c.Exited(); !exited; exited, _ = c.Exited() {
			if kb, err := MemoryKB(c.PID(), "VmHWM"); err == nil {
				peakKB = max(peakKB, kb)
			}
			time.Sleep(100 * time.Millisecond)
		}
		took := time.Since(began)
		b.StopTimer()
		if code, _ := c.Wait(ctx); code != 0 {
			b.Fatalf("rollout of %s: exit %d\n%s", version, code, c.Output())
		}
		used, _ := c.CPU()
		batches, nodesConfirm := confirmTimes(c.Events())
		if batches != 3 {
			b.Fatalf("the rollout of %s had %d batches, want 3 (canary, 50%%, 100%%):\n%s", version, batches, c.Output())
		}
		total += took
		waits += time.Duration(batches) * soak
		confirm += nodesConfirm
		cpu += used
		if err := f.Beats.WaitAll(ctx, f.Names(), version+" everywhere", RunningConfirmed(version)); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
	b.StopTimer()
	n := float64(b.N)
	b.ReportMetric(total.Seconds()/n, "total-s")
	b.ReportMetric(waits.Seconds()/n, "waits-s")
	b.ReportMetric((total-waits).Seconds()/n, "overhead-s")
	b.ReportMetric(confirm.Seconds()/n, "confirm-s")
	b.ReportMetric(cpu.Seconds()/n, "controller-cpu-s")
	b.ReportMetric(float64(peakKB)/1024, "controller-peak-rss-MB")
	b.ReportMetric(0, "ns/op")
}

// confirmTimes reads a rollout's --json events: how many batches it began, and the sum over
// them of the time from a batch's targets being set to its last node confirming.
func confirmTimes(events []rollout.Event) (batches int, confirm time.Duration) {
	var begun, last time.Time
	flush := func() {
		if !begun.IsZero() && last.After(begun) {
			confirm += last.Sub(begun)
		}
	}
	for _, e := range events {
		switch e.Kind {
		case rollout.EventBatch:
			flush()
			batches++
			begun, last = e.Time, time.Time{}
		case rollout.EventConfirmed:
			last = e.Time
		}
	}
	flush()
	return batches, confirm
}
