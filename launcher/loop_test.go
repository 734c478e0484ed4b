package launcher

import (
	"strings"
	"testing"

	"github.com/novox/mesh-host/rollback"
)

func TestDescribeSaysHowAStartEnded(t *testing.T) {
	long := strings.Repeat("x", 300)
	tests := []struct {
		name string
		end  rollback.End
		want string
	}{
		{"deadline wins over the kill signal", rollback.End{Outcome: rollback.OutcomeDeadline, ExitCode: -1, Signal: "killed"}, "did not confirm within the confirm deadline"},
		{"signal", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: -1, Signal: "segmentation fault"}, "killed by signal segmentation fault"},
		{"clean exit with nothing newer", rollback.End{Outcome: rollback.OutcomeFailed}, "exited 0 with nothing newer to stand aside for"},
		{"non-zero exit", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 2}, "exited with status 2"},
		{"could not even start", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: -1, Output: "start /x/mesh-host: permission denied"}, "exited with status -1: start /x/mesh-host: permission denied"},
		{"last output line appended", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1, Output: "starting\nloading\npanic: boom\n\n"}, "exited with status 1: panic: boom"},
		{"deadline with output", rollback.End{Outcome: rollback.OutcomeDeadline, ExitCode: -1, Signal: "killed", Output: "waiting for the bus"}, "did not confirm within the confirm deadline: waiting for the bus"},
		{"blank output adds nothing", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1, Output: " \n\t\n"}, "exited with status 1"},
		{"long last line is cut", rollback.End{Outcome: rollback.OutcomeFailed, ExitCode: 1, Output: long}, "exited with status 1: " + long[:200] + "…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := describe(tt.end); got != tt.want {
				t.Errorf("describe = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestLastLineIsTheLastNonBlankLineCut(t *testing.T) {
	tests := []struct{ in, want string }{
		{"", ""},
		{"   \n\n", ""},
		{"only", "only"},
		{"first\nsecond", "second"},
		{"first\nsecond\n\n  ", "second"},
		{"  indented last  \n", "indented last"},
		{strings.Repeat("a", 200), strings.Repeat("a", 200)},
		{"x\n" + strings.Repeat("b", 201), strings.Repeat("b", 200) + "…"},
	}
	for _, tt := range tests {
		if got := lastLine(tt.in); got != tt.want {
			t.Errorf("lastLine(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

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
