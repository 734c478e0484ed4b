package rollback

import (
	"github.com/novox/mesh-host/internal/text"
	"strings"
	"testing"
)

func TestDescribeSaysHowAStartEnded(t *testing.T) {
	long := strings.Repeat("x", 600)
	tests := []struct {
		name string
		end  End
		want string
	}{
		{"deadline wins over the kill signal", End{Outcome: OutcomeDeadline, ExitCode: -1, Signal: "killed"}, "did not confirm within the confirm deadline"},
		{"signal", End{Outcome: OutcomeFailed, ExitCode: -1, Signal: "segmentation fault"}, "killed by signal segmentation fault"},
		{"clean exit with nothing newer", End{Outcome: OutcomeFailed}, "exited 0 with nothing newer to stand aside for"},
		{"non-zero exit", End{Outcome: OutcomeFailed, ExitCode: 2}, "exited with status 2"},
		{"could not even start", End{Outcome: OutcomeFailed, ExitCode: -1, Output: "start /x/mesh-host: permission denied"}, "exited with status -1: start /x/mesh-host: permission denied"},
		{"last output line appended", End{Outcome: OutcomeFailed, ExitCode: 1, Output: "starting\nloading\npanic: boom\n\n"}, "exited with status 1: panic: boom"},
		{"deadline with output", End{Outcome: OutcomeDeadline, ExitCode: -1, Signal: "killed", Output: "waiting for the bus"}, "did not confirm within the confirm deadline: waiting for the bus"},
		{"blank output adds nothing", End{Outcome: OutcomeFailed, ExitCode: 1, Output: " \n\t\n"}, "exited with status 1"},
		{"long last line is cut", End{Outcome: OutcomeFailed, ExitCode: 1, Output: long}, "exited with status 1: " + text.Cut(long, maxDescribedLine)},
		{"hung", End{Outcome: OutcomeHung, ExitCode: -1, Signal: "killed"}, "showed no sign of life for the liveness limit (hung)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.end.Describe(); got != tt.want {
				t.Errorf("Describe = %q, want %q", got, tt.want)
			}
		})
	}
}
