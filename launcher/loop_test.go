package launcher

import (
	"testing"

	"github.com/novox/mesh-host/rollback"
)

func TestSkippedSummaryNamesEachVersionAndWhy(t *testing.T) {
	if got := skippedSummary(nil); got != "" {
		t.Errorf("skippedSummary(nil) = %q, want empty", got)
	}
	got := skippedSummary([]rollback.Candidate{
		{Version: "v3.0.0", Bad: true},
		{Version: "v2.0.0", Mismatch: "binary changed since it was first seen"},
	})
	want := " (passed over: v3.0.0: marked bad; v2.0.0: binary changed since it was first seen)"
	if got != want {
		t.Errorf("skippedSummary = %q, want %q", got, want)
	}
}
