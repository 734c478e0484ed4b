package lab

import (
	"bytes"
	"context"
	bin64 "encoding/binary"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/wire/meshtest"
)

// journalEntries listens where the launcher built by journalLauncher sends journal entries and
// hands on each, decoded from journald's native protocol.
func journalEntries(t *testing.T, path string) <-chan map[string]string {
	t.Helper()
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch := make(chan map[string]string, 1000)
	go func() {
		defer close(ch)
		buf := make([]byte, 256<<10)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			e, err := decodeJournal(buf[:n])
			if err != nil {
				e = map[string]string{"DECODE_ERROR": err.Error()}
			}
			ch <- e
		}
	}()
	return ch
}

// decodeJournal reads one datagram of journald's native protocol: KEY=value lines, or KEY, a
// newline, a little-endian 64-bit length, the value and a newline for values with newlines.
func decodeJournal(b []byte) (map[string]string, error) {
	e := map[string]string{}
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return e, fmt.Errorf("unterminated field %q", b)
		}
		line := b[:i]
		if k, v, ok := bytes.Cut(line, []byte("=")); ok {
			e[string(k)] = string(v)
			b = b[i+1:]
			continue
		}
		b = b[i+1:]
		if len(b) < 8 {
			return e, fmt.Errorf("field %s: no length", line)
		}
		n := bin64.LittleEndian.Uint64(b)
		if uint64(len(b)-8) < n+1 {
			return e, fmt.Errorf("field %s: short value", line)
		}
		e[string(line)] = string(b[8 : 8+n])
		b = b[8+n+1:]
	}
	return e, nil
}

// journalLauncher builds mesh-launcher with go-systemd's journal socket moved to sock (the
// library's documented build-time override), so the real binary talks to this test's journald.
func journalLauncher(t *testing.T, sock string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "mesh-launcher")
	cmd := exec.Command("go", "build", "-trimpath", "-o", out,
		"-ldflags", "-X github.com/coreos/go-systemd/v22/journal.journalSocket="+sock, PkgLauncher)
	cmd.Dir = bins.Src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, b)
	}
	return out
}

// Under journald (JOURNAL_STREAM names the launcher's stderr) the host's lines are journal
// entries naming the host — SYSLOG_IDENTIFIER=mesh-host, its version and pid — and not lines of
// the launcher's; the launcher's own lines stay on its stderr, and the records keep the host's
// last lines for status. A JOURNAL_STREAM that names another stream (stderr redirected in a
// unit) or none at all leaves everything on stderr, as before.
func TestHostLinesGoToTheJournalUnderJournald(t *testing.T) {
	t.Parallel()
	dir, err := os.MkdirTemp("", "mesh-journal-") // short: a socket path has 108 bytes
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "socket")
	entries := journalEntries(t, sock)
	bin := journalLauncher(t, sock)
	exit1 := build(t, PkgExit1, "v1.0.0")

	for _, tc := range []struct {
		name    string
		stream  func(stderr *os.File) string // JOURNAL_STREAM; "" leaves it unset
		journal bool
	}{
		{"stderr is the journal's stream", func(f *os.File) string {
			var st syscall.Stat_t
			if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
				t.Fatal(err)
			}
			return fmt.Sprintf("%d:%d", st.Dev, st.Ino)
		}, true},
		{"JOURNAL_STREAM names another stream", func(*os.File) string { return "1:1" }, false},
		{"no JOURNAL_STREAM", func(*os.File) string { return "" }, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := meshtest.Context(t, 60*time.Second)
			n := &Node{Name: t.Name(), Root: t.TempDir(), Launcher: bin}
			if err := n.PlaceVersion("v1.0.0", exit1); err != nil {
				t.Fatal(err)
			}
			stderr, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
			if err != nil {
				t.Fatal(err)
			}
			defer stderr.Close()
			cmd := exec.CommandContext(ctx, bin, "run", "--root", n.Root, "--backoff-min", "10ms", "--backoff-max", "10ms")
			cmd.Env = append(os.Environ(), "JOURNAL_STREAM=")
			if s := tc.stream(stderr); s != "" {
				cmd.Env = append(cmd.Env, "JOURNAL_STREAM="+s)
			}
			cmd.Stdout, cmd.Stderr = stderr, stderr
			err = cmd.Run()
			if cmd.ProcessState == nil || cmd.ProcessState.ExitCode() != launcher.ExitFailed {
				t.Fatalf("launcher: %v; want exit %d (exit1 has nothing to roll back to)", err, launcher.ExitFailed)
			}
			logged, err := os.ReadFile(stderr.Name())
			if err != nil {
				t.Fatal(err)
			}

			var pids []string
			for _, s := range starts(t, n.Root, "v1.0.0") {
				pids = append(pids, strconv.Itoa(s.PID))
			}
			var got []map[string]string
		drain:
			for {
				select {
				case e := <-entries:
					got = append(got, e)
				case <-time.After(500 * time.Millisecond):
					break drain
				}
			}
			hostLines := strings.Count(string(logged), "(lab fixture exit1)")
			if !tc.journal {
				if len(got) != 0 || hostLines != 3 {
					t.Errorf("%d journal entries, %d host lines on stderr; want none and 3:\n%v\n%s", len(got), hostLines, got, logged)
				}
			} else {
				if hostLines != 0 || !strings.Contains(string(logged), "component=launcher") {
					t.Errorf("stderr has %d host lines and the launcher's own %v; want none and the launcher's:\n%s", hostLines, strings.Contains(string(logged), "component=launcher"), logged)
				}
				if len(got) != 6 {
					t.Fatalf("%d journal entries, want 6 (two lines from each of 3 starts):\n%v", len(got), got)
				}
				for _, e := range got {
					if e["SYSLOG_IDENTIFIER"] != "mesh-host" || e["MESH_HOST_VERSION"] != "v1.0.0" || e["PRIORITY"] != "6" ||
						!slices.Contains(pids, e["MESH_HOST_PID"]) || e["SYSLOG_PID"] != e["MESH_HOST_PID"] || !strings.HasPrefix(e["MESSAGE"], "mesh-host v1.0.0: ") {
						t.Errorf("entry %v: want SYSLOG_IDENTIFIER=mesh-host, MESH_HOST_VERSION=v1.0.0, PRIORITY=6, MESH_HOST_PID and SYSLOG_PID one of the starts' pids %v, the host's line", e, pids)
					}
				}
			}
			rep, _, err := n.Status(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(rep.FailedReason, "mesh-host v1.0.0: cannot start") {
				t.Errorf("failed reason %q does not carry the host's last line: the tail was not kept", rep.FailedReason)
			}
		})
	}
}
