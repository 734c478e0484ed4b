package action

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
)

// resource makes an action resource the way the parser hands it over.
func resource(command, verify []string) wire.Resource {
	s := &wire.ActionSpec{Command: command, Verify: verify}
	raw, _ := json.Marshal(s)
	return wire.Resource{Type: "action", ID: "act", Spec: raw, Parsed: s}
}

func sh(script string) []string { return []string{"/bin/sh", "-c", script} }

func TestActionRunsOnlyWhenVerifyFails(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		command   string // %D is replaced by the test's temp dir
		verify    string
		wantDiff  bool   // Inspect before Apply reports a difference
		wantErr   string // Apply's error, "" for none
		wantRan   bool   // the command ran (its marker file exists)
		wantAfter bool   // Inspect after Apply still reports a difference
	}{
		{
			name: "verify passes: nothing runs", command: "touch %D/ran",
			verify: "true", wantDiff: false, wantRan: false,
		},
		{
			name: "verify fails: the command runs and then verify passes", command: "touch %D/ran; touch %D/done",
			verify: "test -f %D/done", wantDiff: true, wantRan: true,
		},
		{
			name: "the command runs but verify still fails: the apply fails saying so", command: "touch %D/ran",
			verify: "echo not yet; exit 3", wantDiff: true, wantErr: "ran, but verify still fails (exit 3): not yet", wantRan: true, wantAfter: true,
		},
		{
			name: "the command fails: the error names its status and output", command: "touch %D/ran; echo disk full >&2; exit 7",
			verify: "test -f %D/done", wantDiff: true, wantErr: `command "/bin/sh" failed (exit 7): disk full`, wantRan: true, wantAfter: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			sub := func(s string) string { return strings.ReplaceAll(s, "%D", dir) }
			r := resource(sh(sub(tt.command)), sh(sub(tt.verify)))
			a := Action()
			diff, err := a.Inspect(ctx, r)
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			if (len(diff) > 0) != tt.wantDiff {
				t.Fatalf("Inspect before = %q, want a difference: %v", diff, tt.wantDiff)
			}
			if _, err := os.Stat(filepath.Join(dir, "ran")); err == nil {
				t.Fatal("Inspect ran the command")
			}
			created, err := a.Apply(ctx, r)
			if created {
				t.Error("Apply said created: an action creates nothing the host could remove")
			}
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Apply: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("Apply error = %v, want it to contain %q", err, tt.wantErr)
			}
			_, statErr := os.Stat(filepath.Join(dir, "ran"))
			if ran := statErr == nil; ran != tt.wantRan {
				t.Fatalf("command ran = %v, want %v", ran, tt.wantRan)
			}
			after, err := a.Inspect(ctx, r)
			if err != nil {
				t.Fatalf("Inspect after: %v", err)
			}
			if (len(after) > 0) != tt.wantAfter {
				t.Fatalf("Inspect after = %q, want a difference: %v", after, tt.wantAfter)
			}
		})
	}
}

func TestActionApplyIsIdempotent(t *testing.T) {
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	r := resource(sh("echo x >> "+count+"; touch "+dir+"/done"), sh("test -f "+dir+"/done"))
	a := Action()
	for i := 0; i < 2; i++ {
		if _, err := a.Apply(context.Background(), r); err != nil {
			t.Fatalf("Apply %d: %v", i+1, err)
		}
	}
	b, err := os.ReadFile(count)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), "x"); n != 1 {
		t.Fatalf("the command ran %d times over two applies, want 1", n)
	}
}

func TestInspectQuotesVerifyStatusAndOutput(t *testing.T) {
	tests := []struct {
		name   string
		verify []string
		want   string
	}{
		{"a false verify reports exit 1 and no output", []string{"/bin/false"}, "verify failed (exit 1): (no output)"},
		{"its output is quoted on one line", sh("printf 'not\\nready\\n'; exit 2"), `verify failed (exit 2): not\x0aready`},
		{"a verify killed by a signal says so", sh("kill -9 $$"), "verify failed (signal: killed)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			diff, err := Action().Inspect(context.Background(), resource([]string{"/bin/true"}, tt.verify))
			if err != nil {
				t.Fatal(err)
			}
			if len(diff) != 1 || !strings.HasPrefix(diff[0], tt.want) {
				t.Fatalf("Inspect = %q, want one line starting %q", diff, tt.want)
			}
		})
	}
}

func TestOutputInErrorsIsBounded(t *testing.T) {
	// 200 KB of output, begun by BEGIN and ended by END: the error keeps both ends and says
	// how much it cut.
	r := resource(sh("echo BEGIN; head -c 200000 /dev/zero | tr '\\0' x; echo; echo END; exit 1"), []string{"/bin/false"})
	_, err := Action().Apply(context.Background(), r)
	if err == nil {
		t.Fatal("Apply of a failing command succeeded")
	}
	msg := err.Error()
	if len(msg) > 2*apply.OutputMax {
		t.Fatalf("error is %d bytes, want at most %d", len(msg), 2*apply.OutputMax)
	}
	for _, want := range []string{"BEGIN", "END", "…[cut "} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not contain %q", msg, want)
		}
	}
}

func TestRunFailuresAreErrors(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name string
		a    applier
		ctx  func() context.Context
		r    wire.Resource
		want string
	}{
		{
			name: "a verify that cannot start is an error, not a difference",
			a:    applier{timeout: DefaultTimeout}, ctx: func() context.Context { return ctx },
			r:    resource([]string{"/bin/true"}, []string{"/nonexistent/verify"}),
			want: `verify "/nonexistent/verify" could not be run`,
		},
		{
			name: "a verify over its time limit is killed and says so",
			a:    applier{timeout: 50 * time.Millisecond}, ctx: func() context.Context { return ctx },
			r:    resource([]string{"/bin/true"}, sh("echo waiting; sleep 60")),
			want: `verify "/bin/sh" did not finish within 50ms, killed: context deadline exceeded; output: `,
		},
		{
			name: "a cancelled reconcile stops the verify",
			a:    applier{timeout: DefaultTimeout},
			ctx: func() context.Context {
				c, cancel := context.WithCancel(ctx)
				cancel()
				return c
			},
			r:    resource([]string{"/bin/true"}, sh("sleep 60")),
			want: `verify "/bin/sh": context canceled`,
		},
		{
			name: "an empty command is refused",
			a:    applier{timeout: DefaultTimeout}, ctx: func() context.Context { return ctx },
			r:    resource(nil, []string{"/bin/true"}),
			want: "action spec: command is empty",
		},
		{
			name: "an empty verify is refused",
			a:    applier{timeout: DefaultTimeout}, ctx: func() context.Context { return ctx },
			r:    resource([]string{"/bin/true"}, nil),
			want: "action spec: verify is empty",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := tt.a.Inspect(tt.ctx(), tt.r)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Inspect error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestSpecDecodedWhenNotParsed(t *testing.T) {
	r := wire.Resource{Type: "action", ID: "act", Spec: json.RawMessage(`{"command":["/bin/true"],"verify":["/bin/true"]}`)}
	if diff, err := Action().Inspect(context.Background(), r); err != nil || len(diff) != 0 {
		t.Fatalf("Inspect = %q, %v; want in state", diff, err)
	}
	r.Spec = json.RawMessage(`{"command":["/bin/true"],"verify":["/bin/true"],"shell":true}`)
	if _, err := Action().Inspect(context.Background(), r); err == nil || !strings.Contains(err.Error(), "shell") {
		t.Fatalf("Inspect of a spec with an unknown key: %v, want an error naming it", err)
	}
}

func TestRemoveForgets(t *testing.T) {
	got, err := Action().Remove(context.Background(), apply.Owned{Type: "action", ID: "act", Created: true})
	if err != nil || got != "forgotten: an action has nothing to remove" {
		t.Fatalf("Remove = %q, %v", got, err)
	}
}

func TestTimeoutKillsWhatTheCommandStarted(t *testing.T) {
	// The shell starts a child and waits: killing the shell alone would leave the child. The
	// limit must outlast the shell's start on this machine, or it is killed before it writes
	// its child's pid: each limit is tried in turn until one does.
	var pid string
	for _, limit := range []time.Duration{200 * time.Millisecond, 2 * time.Second, 10 * time.Second, time.Minute} {
		pidFile := filepath.Join(t.TempDir(), "pid")
		verify := sh("sleep 600 & echo $! > " + pidFile + "; wait")
		a := applier{timeout: limit}
		if _, err := a.Inspect(context.Background(), resource([]string{"/bin/true"}, verify)); err == nil {
			t.Fatal("Inspect of a verify over its limit succeeded")
		}
		if b, err := os.ReadFile(pidFile); err == nil && strings.TrimSpace(string(b)) != "" {
			pid = strings.TrimSpace(string(b))
			break
		}
		t.Logf("the shell was killed at its limit of %s before it wrote its child's pid; trying a longer limit", limit)
	}
	if pid == "" {
		t.Fatal("the shell never wrote its child's pid, even with a limit of a minute")
	}
	// The child, killed, may linger a moment as a zombie until it is reaped.
	for deadline := time.Now().Add(goneWithin); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		stat, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
	}
	t.Fatalf("the verify's child %s is still running %s after the verify was killed", pid, goneWithin)
}

// goneWithin bounds the wait for a killed process to go: a bound, never a performance claim.
const goneWithin = 30 * time.Second
