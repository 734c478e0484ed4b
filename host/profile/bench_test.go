package profile

import (
	"context"
	"testing"
)

// What a heartbeat pays to read the inventory (files and statfs, no commands).
func BenchmarkTake(b *testing.B) {
	ctx, root := context.Background(), b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		Take(ctx, root)
	}
}

// What a heartbeat pays for the disks it reads fresh (the rest of the inventory is kept).
func BenchmarkDisks(b *testing.B) {
	ctx, root := context.Background(), b.TempDir()
	b.ReportAllocs()
	for b.Loop() {
		Disks(ctx, root)
	}
}
