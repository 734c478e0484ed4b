package lab

import (
	"net"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// notifySocket listens where systemd would (NOTIFY_SOCKET) and hands on each STATUS= line the
// launcher sends, in order.
func notifySocket(t *testing.T) (path string, status <-chan string) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "notify.sock")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ch := make(chan string, 1000)
	go func() {
		defer close(ch)
		buf := make([]byte, 64<<10)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, line := range strings.Split(string(buf[:n]), "\n") {
				if s, ok := strings.CutPrefix(line, "STATUS="); ok {
					ch <- s
				}
			}
		}
	}()
	return path, ch
}

// statusSeq reads STATUS= lines until each of want has matched, in order, the line after the one
// before it: nothing stale in between, nothing skipped.
type statusSeq struct {
	t    *testing.T
	n    *Node
	ch   <-chan string
	seen []string
}

func (s *statusSeq) next(want string) {
	s.t.Helper()
	s.match(s.read(want), want)
}

// trialThenConfirmed reads a version's trial line and then its confirmed line (with suffix). A
// host that confirms before the launcher first reads the records skips the trial line, and that
// is the truth too.
func (s *statusSeq) trialThenConfirmed(version, suffix string) {
	s.t.Helper()
	v := regexp.QuoteMeta(version)
	confirmed := `running ` + v + ` \(confirmed\)` + suffix
	got := s.read(confirmed)
	if regexp.MustCompile("^" + confirmed + "$").MatchString(got) {
		return
	}
	s.match(got, `running `+v+` \(trial 1/3\)`+suffix)
	s.next(confirmed)
}

func (s *statusSeq) match(got, want string) {
	s.t.Helper()
	if !regexp.MustCompile("^" + want + "$").MatchString(got) {
		s.t.Fatalf("STATUS=%s\nwant STATUS=%s\nSTATUS= so far:\n%s\nlauncher log:\n%s", got, want, strings.Join(s.seen, "\n"), s.n.Log())
	}
}

func (s *statusSeq) read(want string) string {
	s.t.Helper()
	select {
	case got, ok := <-s.ch:
		if !ok {
			s.t.Fatalf("the notify socket closed; STATUS= so far:\n%s", strings.Join(s.seen, "\n"))
		}
		s.seen = append(s.seen, got)
		return got
	case <-time.After(60 * time.Second):
		s.t.Fatalf("no STATUS= matching %q in 60s; so far:\n%s\nlauncher log:\n%s", want, strings.Join(s.seen, "\n"), s.n.Log())
		return ""
	}
}

const hhmm = `(\d{4}-\d\d-\d\d )?\d\d:\d\d`

// STATUS= tells the truth and stays current, under a real launcher running real hosts: the trial
// turns to confirmed when the host confirms, standing aside names the next version, each failure
// says the node is degraded, and a rollback stays on the line for as long as the version rolled
// back to runs.
func TestStatusLineFollowsConfirmStandAsideAndRollback(t *testing.T) {
	t.Parallel()
	sock, ch := notifySocket(t)
	n := newNode(t, "NOTIFY_SOCKET="+sock)
	s := &statusSeq{t: t, n: n, ch: ch}
	place(t, n, "v1.0.0", PkgHost)
	start(t, n, "--backoff-min", "50ms", "--backoff-max", "100ms")
	s.trialThenConfirmed("v1.0.0", "")

	place(t, n, "v1.1.0", PkgHost)
	s.next(`v1\.0\.0 stood aside; starting v1\.1\.0`)
	s.trialThenConfirmed("v1.1.0", "")

	place(t, n, "v1.2.0", PkgCrashRun)
	s.next(`v1\.1\.0 stood aside; starting v1\.2\.0`)
	for trial := range 3 {
		s.next(`running v1\.2\.0 \(trial ` + strconv.Itoa(trial+1) + `/3\)`)
		if trial < 2 {
			s.next(`degraded: v1\.2\.0 exited with status 1: .*crashrun\); restarting in \d+ms`)
		}
	}
	s.next(`rolling back from v1\.2\.0 to v1\.1\.0: v1\.2\.0 failed 3 times without confirming .*`)
	s.trialThenConfirmed("v1.1.0", `; rolled back from v1\.2\.0 at `+hhmm)

	if err := n.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	s.next(`stopping v1\.1\.0 at a safe point`)
}

// A confirmed version that crashes is restarted, and the line says the node is degraded while
// its failures count; a version with nothing to roll back to ends in the failed state, said.
func TestStatusLineSaysDegradedAndFailed(t *testing.T) {
	t.Parallel()
	t.Run("a confirmed version crashing", func(t *testing.T) {
		t.Parallel()
		sock, ch := notifySocket(t)
		n := newNode(t, "NOTIFY_SOCKET="+sock, "MESH_LAB_CRASH_AFTER=6s")
		s := &statusSeq{t: t, n: n, ch: ch}
		place(t, n, "v1.0.0", PkgCrashLater)
		start(t, n, "--backoff-min", "50ms", "--backoff-max", "100ms")
		s.trialThenConfirmed("v1.0.0", "")
		s.next(`degraded: v1\.0\.0 exited with status 1: .*crashlater\); restarting in \d+ms`)
		s.next(`running v1\.0\.0 \(confirmed\); degraded: 1 failure recently \(last: exited with status 1: .*crashlater\)\)`)
	})
	t.Run("nothing to roll back to", func(t *testing.T) {
		t.Parallel()
		sock, ch := notifySocket(t)
		n := newNode(t, "NOTIFY_SOCKET="+sock)
		s := &statusSeq{t: t, n: n, ch: ch}
		place(t, n, "v1.0.0", PkgExit1)
		start(t, n, "--backoff-min", "50ms", "--backoff-max", "100ms")
		for trial := range 3 {
			s.next(`running v1\.0\.0 \(trial ` + strconv.Itoa(trial+1) + `/3\)`)
			if trial < 2 {
				s.next(`degraded: v1\.0\.0 exited with status 1: .*; restarting in \d+ms`)
			}
		}
		s.next(`failed: v1\.0\.0 failed 3 times without ever confirming .* there is no known-good version to roll back to; .*`)
	})
}
