package launcher

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

func TestHostEnvStripsSystemdAndMeshHostIdentityVariables(t *testing.T) {
	in := []string{
		"PATH=/usr/bin",
		"NOTIFY_SOCKET=/run/systemd/notify",
		"HOME=/root",
		"WATCHDOG_USEC=30000000",
		"WATCHDOG_PID=1",
		"LISTEN_FDS=1",
		"LISTEN_PID=1",
		"LISTEN_FDNAMES=x",
		"MESH_HOST_ROOT=/elsewhere",
		"MESH_HOST_VERSION=v0.0.1",
		"MESH_HOST_START_ID=9",
		"MESH_HOST_RECONCILE_INTERVAL=1s", // a host setting: passed through
		"NOTIFY_SOCKET_EXTRA=kept",        // only exact names are stripped
		"MESH_HOST_ROOTS=kept",
		"EMPTY=",
		"NOEQUALS",
	}
	orig := append([]string(nil), in...)
	got := hostEnv(in)
	want := []string{
		"PATH=/usr/bin",
		"HOME=/root",
		"MESH_HOST_RECONCILE_INTERVAL=1s",
		"NOTIFY_SOCKET_EXTRA=kept",
		"MESH_HOST_ROOTS=kept",
		"EMPTY=",
		"NOEQUALS",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hostEnv =\n%q\nwant\n%q", got, want)
	}
	if !reflect.DeepEqual(in, orig) {
		t.Errorf("hostEnv changed its input: %q", in)
	}
	if got := hostEnv(nil); len(got) != 0 {
		t.Errorf("hostEnv(nil) = %q", got)
	}
}

func TestTailKeepsTheLastLines(t *testing.T) {
	tests := []struct {
		name  string
		lines int
		want  []string
	}{
		{"none", 0, nil},
		{"fewer than the limit", 3, []string{"line 1", "line 2", "line 3"}},
		{"exactly the limit", tailLines, nil},
		{"more than the limit", 45, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := &tail{max: tailLines}
			for i := 1; i <= tt.lines; i++ {
				tl.add(fmt.Sprintf("line %d", i))
			}
			want := tt.want
			if want == nil && tt.lines > 0 {
				for i := max(1, tt.lines-tailLines+1); i <= tt.lines; i++ {
					want = append(want, fmt.Sprintf("line %d", i))
				}
			}
			if got := tl.String(); got != strings.Join(want, "\n") {
				t.Errorf("String() =\n%s\nwant\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
	if tailLines != 20 {
		t.Errorf("tailLines = %d, want 20", tailLines)
	}
}

func TestTailTruncatesLongLines(t *testing.T) {
	tl := &tail{max: tailLines}
	tl.add(strings.Repeat("z", 600))
	tl.add(strings.Repeat("y", 512))
	lines := strings.Split(tl.String(), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines", len(lines))
	}
	if want := txt.Cut(strings.Repeat("z", 600), 512); lines[0] != want {
		t.Errorf("long line kept as %q, want %q", lines[0], want)
	}
	if lines[1] != strings.Repeat("y", 512) {
		t.Errorf("a line of exactly 512 bytes was changed")
	}
}

func TestTailIsSafeForConcurrentUse(t *testing.T) {
	tl := &tail{max: tailLines}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				tl.add("line")
				_ = tl.String()
			}
		}()
	}
	wg.Wait()
	if n := len(strings.Split(tl.String(), "\n")); n != tailLines {
		t.Errorf("kept %d lines, want %d", n, tailLines)
	}
}

// The relay once stopped at a 1 MiB line and closed the pipe; the host died of SIGPIPE on its
// next write. Whatever the host writes, the relay reads it all.
func TestRelayDrainsOutputWhateverItIs(t *testing.T) {
	garbage := make([]byte, 3<<20)
	rand.Read(garbage)
	for _, tc := range []struct {
		name  string
		in    []byte
		lines int    // lines relayed
		cut   string // a marker that must appear
	}{
		{"short lines pass as they are", []byte("a\nb\nc\n"), 3, ""},
		{"a last line without a newline", []byte("a\nb"), 2, ""},
		{"a 10 MB line is cut with a marker", append(bytes.Repeat([]byte("x"), 10<<20), '\n'), 1, fmt.Sprintf("[line cut: %d more bytes]", 10<<20-maxLine)},
		{"binary garbage", garbage, bytes.Count(garbage, []byte("\n")) + 1, ""},
		{"an exactly maxLine line is not cut", append(bytes.Repeat([]byte("y"), maxLine), '\n'), 1, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			tl := &tail{max: tailLines}
			relay(bytes.NewReader(tc.in), &out, tl, nil)
			// Every line is relayed, or counted as dropped when the log fell behind.
			if n := relayedOrDropped(t, out.String()); n != tc.lines {
				t.Errorf("relayed or dropped %d lines, want %d", n, tc.lines)
			}
			for _, line := range bytes.Split(bytes.TrimSuffix(out.Bytes(), []byte("\n")), []byte("\n")) {
				if len(line) > maxLine+64 {
					t.Fatalf("relayed a line of %d bytes, over the %d-byte cap", len(line), maxLine)
				}
			}
			if tc.cut != "" && !strings.Contains(out.String(), tc.cut) {
				t.Errorf("no marker %q in the relayed output", tc.cut)
			}
			if tc.cut == "" && strings.Contains(out.String(), "[line cut") {
				t.Errorf("a line was cut that fits")
			}
		})
	}
}

// A log that cannot keep up never holds up the host: lines are dropped and counted, and
// reading goes on.
func TestRelayNeverBlocksTheHostOnASlowLog(t *testing.T) {
	pr, pw := io.Pipe()
	slow := &slowWriter{release: make(chan struct{})}
	done := make(chan struct{})
	go func() {
		relay(pr, slow, &tail{max: tailLines}, nil)
		close(done)
	}()
	// Far more lines than the queue holds, written while the log is stuck.
	wrote := make(chan struct{})
	go func() {
		for i := 0; i < 20*relayQueue; i++ {
			fmt.Fprintf(pw, "line %d\n", i)
		}
		pw.Close()
		close(wrote)
	}()
	select {
	case <-wrote:
	case <-time.After(30 * time.Second):
		t.Fatal("the host's writes blocked behind a stuck log")
	}
	close(slow.release)
	<-done
	if !droppedNotice.MatchString(slow.String()) {
		t.Errorf("the dropped lines were not counted in the log")
	}
}

var droppedNotice = regexp.MustCompile(`(?m)^\[mesh-launcher: (\d+) lines? of the host's output (?:were|was) dropped`)

func relayedOrDropped(t *testing.T, out string) int {
	t.Helper()
	n := strings.Count(out, "\n")
	for _, m := range droppedNotice.FindAllStringSubmatch(out, -1) {
		d, err := strconv.Atoi(m[1])
		if err != nil {
			t.Fatal(err)
		}
		n += d - 1 // the notice's own line is not the host's
	}
	return n
}

type slowWriter struct {
	release chan struct{}
	mu      sync.Mutex
	b       bytes.Buffer
}

func (w *slowWriter) Write(p []byte) (int, error) {
	<-w.release
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *slowWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

// A host of any version that prints a bus URL with its password (older hosts logged the raw URL)
// leaves the password neither in the launcher's own log nor in the output the records keep.
func TestHostOutputIsPassedOnAndKeptWithBusCredentialsRedacted(t *testing.T) {
	root := t.TempDir()
	bin := rollback.BinaryPath(root, "v1.0.0")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'level=INFO msg=\"link: connected\" bus=nats://mesh:S3cretPassw0rd@10.0.0.1:4222' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	passed, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer passed.Close()
	l := &Launcher{cfg: Config{Root: root, Stderr: passed, Stdout: passed}}
	p, err := l.startHost("v1.0.0", 1)
	if err != nil {
		t.Fatal(err)
	}
	<-p.exited
	kept := p.output()
	log, err := os.ReadFile(passed.Name())
	if err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"kept output": kept, "passed-on log": string(log)} {
		if strings.Contains(out, "S3cretPassw0rd") || !strings.Contains(out, "bus=nats://mesh:xxxxx@10.0.0.1:4222") {
			t.Errorf("%s: %q, want the password redacted and the rest kept", what, out)
		}
	}
}
