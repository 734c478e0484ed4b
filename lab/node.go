package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/launcher"
	"github.com/novox/mesh-host/rollback"
)

// Node is one machine in the lab: a root and the launcher run on it.
type Node struct {
	Name     string
	Root     string
	Launcher string // path of the mesh-launcher binary
	// Arch is the GOARCH its launcher and hosts are built for ("" is this machine's): another
	// architecture's run through qemu-user.
	Arch string
	Env  []string // extra environment for the launcher (and so the host): MESH_HOST_*
	Args []string // flags every Start gives `mesh-launcher run` before its own
	// Tee, if set, also receives everything the launcher and its hosts write (a log file for
	// a person to follow).
	Tee io.Writer

	mu   sync.Mutex
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan struct{}
	code int
}

// PlaceVersion installs binary as versions/<v>/mesh-host the way a stager does: copied into a
// staging directory, fsynced, and renamed into place, so a launcher never sees half a version.
func (n *Node) PlaceVersion(version, binary string) error {
	// rollback.Staging, so the staging directory is flocked while filled: a host starting
	// meanwhile (each stand-aside starts one) cleans up leftovers, and would take it for one.
	s, err := rollback.NewStaging(n.Root)
	if err != nil {
		return err
	}
	defer s.Discard()
	if err := copyFile(binary, s.BinaryPath(), 0o755); err != nil {
		return err
	}
	if err := os.Chmod(s.Dir(), 0o755); err != nil {
		return err
	}
	// Nothing is recorded: the version is found, as one copied in by hand.
	return s.Commit(context.Background(), recordNothing{}, version, "", rollback.Provenance{})
}

// recordNothing is a VersionRecorder that leaves the records alone.
type recordNothing struct{}

func (recordNothing) RecordVersion(context.Context, string, digest.Digest, rollback.Provenance) error {
	return nil
}

// copyFile copies src to dst with mode, atomically.
func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := atomicfile.Create(filepath.Dir(dst), mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Abort()
		return err
	}
	return out.Commit(dst)
}

// Start runs `mesh-launcher run --root ROOT Args… args…` in the background. Started again after
// it exited, the node keeps one log across its runs.
func (n *Node) Start(args ...string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	cmd := exec.Command(n.Launcher, append(append([]string{"run", "--root", n.Root}, n.Args...), args...)...)
	cmd.Env = append(os.Environ(), n.Env...)
	if n.log == nil {
		n.log = &lockedBuffer{tee: n.Tee}
	}
	cmd.Stdout, cmd.Stderr = n.log, n.log
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start launcher for %s: %w", n.Name, err)
	}
	n.cmd, n.done = cmd, make(chan struct{})
	go func(done chan struct{}) {
		cmd.Wait()
		n.mu.Lock()
		n.code = cmd.ProcessState.ExitCode()
		n.mu.Unlock()
		close(done)
	}(n.done)
	return nil
}

// PID is the running launcher's pid.
func (n *Node) PID() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil || n.cmd.Process == nil {
		return 0
	}
	return n.cmd.Process.Pid
}

// Log is what the launcher and its hosts have written so far.
func (n *Node) Log() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.log == nil {
		return ""
	}
	return n.log.String()
}

// Signal sends sig to the launcher.
func (n *Node) Signal(sig syscall.Signal) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return fmt.Errorf("%s: no launcher running", n.Name)
	}
	return n.cmd.Process.Signal(sig)
}

// Wait waits for the launcher to exit and returns its exit status.
func (n *Node) Wait(ctx context.Context) (int, error) {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	select {
	case <-done:
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.code, nil
	case <-ctx.Done():
		return 0, fmt.Errorf("%s: the launcher did not exit: %w", n.Name, ctx.Err())
	}
}

// Stop sends SIGTERM and waits for the launcher to exit.
func (n *Node) Stop(ctx context.Context) (int, error) {
	if err := n.Signal(syscall.SIGTERM); err != nil {
		return 0, err
	}
	return n.Wait(ctx)
}

// Status runs `mesh-launcher status --json` and decodes it; code is its exit status (0
// healthy, 4 degraded, 3 failed).
func (n *Node) Status(ctx context.Context) (rep launcher.Report, code int, err error) {
	cmd := exec.CommandContext(ctx, n.Launcher, "status", "--root", n.Root, "--json")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil && cmd.ProcessState == nil {
		return rep, -1, fmt.Errorf("mesh-launcher status: %w", err)
	}
	code = cmd.ProcessState.ExitCode()
	if code != 0 && code != launcher.ExitFailed && code != launcher.ExitDegraded {
		return rep, code, fmt.Errorf("mesh-launcher status: exit %d: %s", code, stderr.String())
	}
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		return rep, code, fmt.Errorf("decode status: %w\n%s", err, out.String())
	}
	return rep, code, nil
}

// StatusText runs `mesh-launcher status` for a person to read.
func (n *Node) StatusText(ctx context.Context) string {
	out, _ := exec.CommandContext(ctx, n.Launcher, "status", "--root", n.Root).CombinedOutput()
	return string(out)
}

// WaitStatus polls status until ok returns true or ctx ends; it returns the last report.
// Polling is the lab's observer, not part of the system under test.
func (n *Node) WaitStatus(ctx context.Context, what string, ok func(launcher.Report) bool) (launcher.Report, error) {
	var last launcher.Report
	var lastErr error
	for {
		rep, _, err := n.Status(ctx)
		if err == nil {
			last = rep
			if ok(rep) {
				return rep, nil
			}
		} else {
			lastErr = err
		}
		select {
		case <-ctx.Done():
			return last, fmt.Errorf("%s: waiting for %s: %w (last status error: %v)", n.Name, what, ctx.Err(), lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// lockedBuffer is a bytes.Buffer safe for a process's two output streams.
type lockedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	tee io.Writer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.tee != nil {
		l.tee.Write(p) // a log file that fails must not stop the launcher's output
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Version returns the status entry of version, if any.
func Version(rep launcher.Report, version string) (rollback.VersionStatus, bool) {
	for _, v := range rep.Versions {
		if v.Version == version {
			return v, true
		}
	}
	return rollback.VersionStatus{}, false
}

// Running is the running version in a report, or "".
func Running(rep launcher.Report) string {
	if rep.Running == nil {
		return ""
	}
	return rep.Running.Version
}

// Alive reports whether the launcher was started and has not exited.
func (n *Node) Alive() bool {
	n.mu.Lock()
	done := n.done
	n.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}

// Staged counts the times the node's host logged that it staged version (fetched, verified,
// preflighted and renamed it into place).
func (n *Node) Staged(version string) int {
	staged := 0
	for _, line := range strings.Split(n.Log(), "\n") {
		if strings.Contains(line, `msg="host version staged"`) && strings.Contains(line, "version="+version+" ") {
			staged++
		}
	}
	return staged
}

// Has reports whether versions/<version> is on the node's disk.
func (n *Node) Has(version string) bool {
	_, err := os.Stat(rollback.VersionDir(n.Root, version))
	return err == nil
}

// StageLauncher puts binary under ROOT/launchers/<v> as a host stages a launcher a release
// carries: a staging directory, its digest recorded as delivered (signed by "lab", carried by
// carriedBy), then one rename.
func StageLauncher(ctx context.Context, root, v, binary, carriedBy string) error {
	r, err := rollback.OpenForInstall(ctx, root)
	if err != nil {
		return err
	}
	defer r.Close()
	st, err := rollback.NewLauncherStaging(root)
	if err != nil {
		return err
	}
	defer st.Discard()
	b, err := os.ReadFile(binary)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(st.BinaryPath(), b, 0o755); err != nil {
		return err
	}
	lv := rollback.LauncherVersion{Version: v, Digest: digest.FromBytes(b), Size: int64(len(b)),
		Provenance: rollback.Provenance{Source: rollback.SourceDelivered, SignedBy: "lab"}, CarriedBy: carriedBy}
	return st.CommitLauncher(ctx, r, lv)
}
