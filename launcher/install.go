package launcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/opencontainers/go-digest"
	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/internal/layout"
	txt "github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
)

// VersionCheckTimeout bounds `FILE version`: a binary that cannot say its version within it is
// not one the launcher can run.
const VersionCheckTimeout = 10 * time.Second

// Installed is what Install did.
type Installed struct {
	Version string
	Digest  digest.Digest
	Dir     string // ROOT/versions/<v>
	From    string // the file, as an absolute path
	// Already is true when versions/<v> held these very bytes: nothing was changed.
	Already bool
	// Chosen is the version Choose names now: Version, or a newer one that stays chosen.
	Chosen string
	// Launcher is the pid of a launcher running on the root, 0 if none; Running the version
	// its host runs ("" if none).
	Launcher int
	Running  string
}

// Install places the mesh-host binary at file as versions/<version> under root, through the
// same staging as delivery: copied into versions/.staging-* and fsynced, checked to run (`version`
// must print the version), its digest and "installed by hand" recorded in records.db, then one
// rename. With version "" the version is what the binary prints. It refuses, saying why and
// what to do: a file that is missing, not executable or not a mesh-host for this machine; a
// binary that says another version than asked, or none; a version already there with other
// bytes, recorded with other bytes, or marked bad here. The same bytes already there are no
// error (Already). It never chooses: the newest good version still runs, whatever is installed.
func Install(ctx context.Context, root, file, version string) (Installed, error) {
	in := Installed{Version: version}
	if version != "" && !layout.ValidVersion(version) {
		return in, fmt.Errorf("--version %q is not %s", version, layout.VersionRule)
	}
	src, err := openExecutable(file)
	if err != nil {
		return in, err
	}
	defer src.Close()
	if in.From, err = filepath.Abs(file); err != nil {
		return in, err
	}
	r, err := rollback.OpenForInstall(ctx, root)
	if err != nil {
		return in, writable(root, err)
	}
	defer r.Close()

	st, err := rollback.NewStaging(root)
	if err != nil {
		return in, writable(root, err)
	}
	defer st.Discard() // nothing once committed
	if in.Digest, err = copyBinary(st.BinaryPath(), src); err != nil {
		return in, writable(root, err)
	}
	// The copy is what is checked, so what runs later is what was checked.
	said, err := reportedVersion(ctx, st.BinaryPath(), file)
	if err != nil {
		return in, err
	}
	switch {
	case version == "" && !layout.ValidVersion(said):
		return in, fmt.Errorf("`%s version` printed %q, which is not %s; is %s a mesh-host built with `make build VERSION=…`?",
			file, said, layout.VersionRule, file)
	case version == "":
		in.Version = said
	case said != version:
		return in, fmt.Errorf("%s says it is %s (`%s version`), not %s as --version says; install it as %s, or build the right one with `make build VERSION=%s`",
			file, txt.Printable(said), file, version, txt.Printable(said), version)
	}
	in.Dir = rollback.VersionDir(root, in.Version)
	prov := rollback.Provenance{Source: rollback.SourceInstalled, From: in.From}

	if err := checkNotThere(ctx, r, root, in); err != nil {
		if !errors.Is(err, errSameBytes) {
			return in, err
		}
		// Copied there by hand, the record may be missing: these bytes are now checked, and a
		// record already there is kept.
		if err := r.RecordVersion(ctx, in.Version, in.Digest, prov); err != nil {
			return in, err
		}
		in.Already = true
	} else {
		err := st.Commit(ctx, r, in.Version, in.Digest, prov)
		if errors.Is(err, rollback.ErrVersionExists) { // put there meanwhile, by a delivery or another install
			err = checkNotThere(ctx, r, root, in)
			in.Already = errors.Is(err, errSameBytes)
			if in.Already {
				err = nil
			}
		}
		if err != nil {
			return in, writable(root, fmt.Errorf("install %s: %w", in.Version, err))
		}
	}
	return in, chosen(ctx, r, root, &in)
}

// errSameBytes is checkNotThere's answer when versions/<v> holds the very bytes being installed.
var errSameBytes = errors.New("already installed with the same bytes")

// checkNotThere refuses a version that is in place with other bytes, recorded with other
// bytes, or marked bad; it returns errSameBytes when the same bytes are in place.
func checkNotThere(ctx context.Context, r *rollback.Records, root string, in Installed) error {
	rec, known, err := r.Lookup(ctx, in.Version)
	if err != nil {
		return err
	}
	if known && rec.Bad {
		return fmt.Errorf("%s is marked bad on this node (%s), so it would never run; install a fixed version under a new version",
			in.Version, txt.Printable(rec.BadReason))
	}
	if known && rec.Digest != in.Digest {
		return &rollback.DigestConflict{Version: in.Version, Recorded: rec.Digest, Got: in.Digest}
	}
	fi, err := os.Lstat(in.Dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s exists and is not a version directory; move it away first", in.Dir)
	}
	have, err := r.BinaryDigest(rollback.BinaryPath(root, in.Version))
	if err != nil {
		return fmt.Errorf("%s already exists but holds no usable %s (%v); move it away first", in.Dir, rollback.BinaryName, err)
	}
	if have != in.Digest {
		return fmt.Errorf("%s is already installed with other bytes (%s; %s is %s): a version's bytes never change, so it is not replaced; build %s as a new version",
			in.Version, have, in.From, in.Digest, in.From)
	}
	return errSameBytes
}

// chosen fills in what Choose names now and what a running launcher runs.
func chosen(ctx context.Context, r *rollback.Records, root string, in *Installed) error {
	ch, err := r.Choose(ctx, root)
	if err != nil {
		return err
	}
	in.Chosen = ch.Version
	if in.Launcher = rollback.LauncherRunning(root); in.Launcher != 0 {
		st, err := r.Status(ctx, root, rollback.DefaultPolicy)
		if err != nil {
			return err
		}
		if st.Running != nil {
			in.Running = st.Running.Version
		}
	}
	return nil
}

// WriteText says what Install did, and what runs now, for the person (or postinst) that ran it.
func (in Installed) WriteText(w io.Writer) {
	if in.Already {
		fmt.Fprintf(w, "%s is already installed in %s with the same bytes (%s); nothing changed\n", in.Version, in.Dir, in.Digest)
	} else {
		fmt.Fprintf(w, "installed %s in %s (%s), installed by hand from %s\n", in.Version, in.Dir, in.Digest, in.From)
	}
	switch {
	case in.Chosen != in.Version && semver.Compare(in.Chosen, in.Version) > 0:
		fmt.Fprintf(w, "%s stays chosen: it is newer, and the launcher runs the newest good version; %s is kept as a directory only\n", in.Chosen, in.Version)
	case in.Chosen != in.Version:
		fmt.Fprintf(w, "the version to run is %s\n", dash(in.Chosen))
	case in.Launcher == 0:
		fmt.Fprintf(w, "%s is the version to run: start mesh-launcher (systemctl start mesh-launcher) to run it\n", in.Version)
	case in.Running == in.Version:
		fmt.Fprintf(w, "%s is running\n", in.Version)
	case in.Running != "":
		fmt.Fprintf(w, "%s is the version to run: the running host (%s) stands aside for it after its next reconcile\n", in.Version, in.Running)
	default:
		fmt.Fprintf(w, "%s is the version to run: the running launcher (pid %d) starts it next\n", in.Version, in.Launcher)
	}
}

// openExecutable opens file, which must be an executable regular file.
func openExecutable(file string) (*os.File, error) {
	f, err := os.Open(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s does not exist; name the mesh-host binary to install", file)
	}
	if err != nil {
		return nil, err
	}
	fi, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, err
	case !fi.Mode().IsRegular():
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file (%s); name the mesh-host binary to install", file, fi.Mode().Type())
	case fi.Mode().Perm()&0o111 == 0:
		f.Close()
		return nil, fmt.Errorf("%s is not executable (mode %#o); is it the mesh-host binary? (chmod +x it if it is)", file, fi.Mode().Perm())
	}
	return f, nil
}

// copyBinary copies src to path (mode 0755), hashing it on the way, and fsyncs it.
func copyBinary(path string, src io.Reader) (digest.Digest, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return "", err
	}
	dg := digest.SHA256.Digester()
	_, err = io.Copy(io.MultiWriter(f, dg.Hash()), src)
	if err == nil {
		err = f.Chmod(0o755) // whatever the umask
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("copy the binary to %s: %w", path, err)
	}
	return dg.Digest(), nil
}

// reportedVersion runs `bin version` and returns the first line it printed; name is what the
// operator called the file, for the errors.
func reportedVersion(ctx context.Context, bin, name string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, VersionCheckTimeout)
	defer cancel()
	var stdout, stderr bytes.Buffer
	var err error
	for try := 0; ; try++ {
		stdout.Reset()
		stderr.Reset()
		cmd := exec.CommandContext(ctx, bin, rollback.CmdVersion)
		cmd.Stdout, cmd.Stderr = &limited{&stdout, 4 << 10}, &limited{&stderr, 4 << 10}
		cmd.Dir = "/"
		cmd.WaitDelay = time.Second
		err = cmd.Run()
		// A file just written may be briefly busy if another goroutine of this process forked
		// while it was open for writing (golang.org/issue/22315); that passes.
		if errors.Is(err, syscall.ETXTBSY) && try < 20 && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		break
	}
	said := ""
	if s := strings.TrimSpace(stderr.String()); s != "" {
		said = "; it said: " + txt.Printable(s)
	}
	switch {
	case errors.Is(err, syscall.ENOEXEC):
		return "", fmt.Errorf("%s cannot be executed on this machine (exec format error): it is not a program, or is built for another architecture; install a mesh-host built for this machine", name)
	case ctx.Err() == context.DeadlineExceeded:
		return "", fmt.Errorf("`%s version` did not finish within %s; is it a mesh-host binary?%s", name, VersionCheckTimeout, said)
	case err != nil:
		return "", fmt.Errorf("`%s version` failed (%v): it cannot run here, or is not a mesh-host binary%s", name, err, said)
	}
	first, _, _ := strings.Cut(stdout.String(), "\n")
	return strings.TrimSpace(first), nil
}

// limited keeps at most n bytes of what is written to it and discards the rest, so a chatty
// binary cannot fill memory.
type limited struct {
	b *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// writable adds the fix to an error that says the root cannot be written.
func writable(root string, err error) error {
	if errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS) {
		return fmt.Errorf("%w\nthe root %s is not writable by this user: run install as the user the service runs as (root), or point --root at the right directory", err, root)
	}
	return err
}
