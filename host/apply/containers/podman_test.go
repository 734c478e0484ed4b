package containers

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire/meshtest"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// podman is a real Podman kept inside a test's temp dir: its storage, run state and
// configuration there, no network (netns none), nothing written to /var/lib/containers.
type podman struct {
	t     *testing.T
	exe   string // a wrapper script giving the client its place: what Options.Commands names
	image string // localhost/mesh-host-test@sha256:…, the image the test built
}

// newPodman builds an image holding one static program and runs it once; it skips, saying
// exactly why, where Podman cannot run a container (and fails under CI, which runs as root and
// installs podman and runc: .ci/run).
func newPodman(t *testing.T) *podman {
	t.Helper()
	if os.Getuid() != 0 {
		meshtest.SkipUnlessCI(t, "the podman test runs as root (rootless podman needs subordinate ids set up)")
	}
	bin, err := exec.LookPath("podman")
	if err != nil {
		meshtest.SkipUnlessCI(t, "podman is not installed (Debian's podman and runc; .ci/run installs them)")
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		meshtest.SkipUnlessCI(t, "no go command to build the test image's program")
	}
	// Podman refuses a run root path over 50 characters; a test's temp dir is longer.
	dir, err := os.MkdirTemp("", "mhpod")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// Where a machine cannot raise rlimits (no CAP_SYS_RESOURCE) or has cgroups that crun will
	// not use (v1 with a v2 hierarchy beside it), lowered limits and runc make it run.
	conf := "[containers]\ndefault_ulimits = [\"nofile=1024:1024\", \"nproc=1024:1024\"]\nnetns = \"none\"\nlog_driver = \"k8s-file\"\n" +
		"[engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\nevents_logfile_path = \"" + filepath.Join(dir, "events.log") + "\"\n"
	// runc keeps its state in /run/runc unless told otherwise: here, in the temp dir.
	var runtimeFlag string
	if _, err := exec.LookPath("runc"); err == nil {
		conf += "runtime = \"runc\"\n"
		runtimeFlag = "--runtime-flag " + shellQuote("root="+filepath.Join(dir, "runc")) + " "
	}
	if err := os.WriteFile(filepath.Join(dir, "containers.conf"), []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		meshtest.SkipUnlessCI(t, "no unshare to keep podman's blob cache off the machine's /var/lib")
	}
	// Podman 4 writes a blob cache to /var/lib/containers/cache whatever its --root: it runs in
	// a mount namespace of its own where a temp dir stands there (over /var/lib on a machine
	// without /var/lib/containers, so that nothing is made there either).
	hide := "/var/lib/containers"
	if _, err := os.Stat(hide); err != nil {
		hide = "/var/lib"
	}
	if err := os.Mkdir(filepath.Join(dir, "var"), 0o700); err != nil {
		t.Fatal(err)
	}
	inner := filepath.Join(dir, "podman-inner")
	script := fmt.Sprintf("#!/bin/sh\nmount --bind %s %s || exit 125\nCONTAINERS_CONF=%s exec %s %s--root %s --runroot %s --tmpdir %s --storage-driver vfs \"$@\"\n",
		shellQuote(filepath.Join(dir, "var")), shellQuote(hide), shellQuote(filepath.Join(dir, "containers.conf")),
		shellQuote(bin), runtimeFlag,
		shellQuote(filepath.Join(dir, "root")), shellQuote(filepath.Join(dir, "run")), shellQuote(filepath.Join(dir, "tmp")))
	if err := os.WriteFile(inner, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	p := &podman{t: t, exe: filepath.Join(dir, "podman")}
	wrapper := fmt.Sprintf("#!/bin/sh\nexec %s --mount --propagation private %s \"$@\"\n", shellQuote(unshare), shellQuote(inner))
	if err := os.WriteFile(p.exe, []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Containers first (their monitors with them), then images: the temp dir goes after.
		_, _ = p.try("rm", "--all", "--force", "--time", "0")
		_, _ = p.try("rmi", "--all", "--force")
	})

	program := filepath.Join(dir, "hello")
	build := exec.Command(goBin, "build", "-o", program, "./testdata/hello")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the test image's program: %v: %s", err, out)
	}
	layer := filepath.Join(dir, "layer.tar")
	writeLayer(t, layer, program)
	p.must("import", "--change", `CMD ["/hello"]`, layer, "localhost/mesh-host-test:v1")
	p.image = strings.TrimSpace(p.must("image", "inspect", "--format", "{{index .RepoDigests 0}}", "localhost/mesh-host-test:v1"))
	if err := wire.CheckPinnedImage(p.image); err != nil {
		t.Fatalf("the imported image's repo digest %q: %v", p.image, err)
	}
	if out, err := p.try("run", "--rm", p.image, "/hello", "probe"); err != nil {
		meshtest.SkipUnlessCI(t, "podman is installed but cannot run a container here: %v: %s", err, text.Printable(text.Cut(out, 400)))
	}
	return p
}

// writeLayer writes a tar holding program as /hello.
func writeLayer(t *testing.T, path, program string) {
	t.Helper()
	b, err := os.ReadFile(program)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: "hello", Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(b); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
}

func (p *podman) try(args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, p.exe, args...).CombinedOutput()
	return string(out), err
}

func (p *podman) must(args ...string) string {
	p.t.Helper()
	out, err := p.try(args...)
	if err != nil {
		p.t.Fatalf("podman %q: %v: %s", args, err, out)
	}
	return out
}

func (p *podman) field(name, format string) string {
	p.t.Helper()
	return strings.TrimSpace(p.must("container", "inspect", "--format", format, name))
}

// logsContain waits for the container's output to hold want (a program's first line can come
// after its start returns).
func (p *podman) logsContain(name, want string) {
	p.t.Helper()
	for range 100 {
		if out, _ := p.try("logs", name); strings.Contains(out, want) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	out, _ := p.try("logs", name)
	p.t.Fatalf("logs of %s = %q, want %q in them", name, out, want)
}

func TestPodmanRunsTheDeclaredContainer(t *testing.T) {
	p := newPodman(t)
	ctx := context.Background()
	a := Container(Options{Runtime: "podman", Commands: map[string]string{"podman": p.exe}})
	const name = "mesh-host-test-web"
	spec := wire.ContainerSpec{Image: p.image, Command: []string{"/hello", "serve"}, Env: map[string]string{"GREETING": "first"}}
	r := resource(name, spec)

	if diff := mustInspect(t, a, r); !slices.Equal(diff, []string{"absent"}) {
		t.Fatalf("Inspect before = %q, want [absent]", diff)
	}
	if !mustApply(t, a, r) {
		t.Error("first Apply said created=false")
	}
	if diff := mustInspect(t, a, r); len(diff) != 0 {
		t.Fatalf("read-back after create = %q: podman's normalised config read as drift?", diff)
	}
	if got := p.field(name, "{{.State.Running}}"); got != "true" {
		t.Fatalf("running = %s", got)
	}
	p.logsContain(name, `hello first ["serve"]`)
	if got := p.field(name, `{{index .Config.Labels "io.mesh-host.declaration"}}`); got != DeclarationDigest(name, spec) {
		t.Fatalf("declaration label = %q", got)
	}
	id := p.field(name, "{{.Id}}")

	t.Run("a second apply changes nothing", func(t *testing.T) {
		if mustApply(t, a, r) {
			t.Error("second Apply said created=true")
		}
		if got := p.field(name, "{{.Id}}"); got != id {
			t.Fatalf("container replaced: id %s, was %s", got, id)
		}
	})

	t.Run("a stopped container is started", func(t *testing.T) {
		// stop returns when the process has exited; conmon removes runc's state just after, and
		// a start in between fails ("container with given ID already exists"): the applier
		// must ride that out, so the test starts it again at once.
		p.must("stop", "--time", "5", name)
		diff := mustInspect(t, a, r)
		if len(diff) != 1 || !strings.HasPrefix(diff[0], "not running (") {
			t.Fatalf("Inspect of a stopped container = %q", diff)
		}
		mustApply(t, a, r)
		if got := p.field(name, "{{.State.Running}}"); got != "true" {
			t.Fatalf("running after Apply = %s", got)
		}
		if got := p.field(name, "{{.Id}}"); got != id {
			t.Fatal("starting replaced the container")
		}
	})

	spec2 := spec
	spec2.Env = map[string]string{"GREETING": "second"}
	r2 := resource(name, spec2)
	t.Run("a changed spec replaces it", func(t *testing.T) {
		diff := mustInspect(t, a, r2)
		if len(diff) != 1 || !strings.HasPrefix(diff[0], "declared differently (label "+DeclarationDigest(name, spec)) {
			t.Fatalf("Inspect of a changed spec = %q", diff)
		}
		if mustApply(t, a, r2) {
			t.Error("replacing said created=true")
		}
		if got := p.field(name, "{{.Id}}"); got == id {
			t.Fatal("the container was not replaced")
		}
		if diff := mustInspect(t, a, r2); len(diff) != 0 {
			t.Fatalf("read-back = %q", diff)
		}
		p.logsContain(name, `hello second ["serve"]`)
	})

	t.Run("removed when no longer declared", func(t *testing.T) {
		got, err := a.Remove(ctx, apply.Owned{Type: "container", ID: name, Spec: r2.Spec, Created: true})
		if err != nil || got != "removed" {
			t.Fatalf("Remove = %q, %v", got, err)
		}
		if diff := mustInspect(t, a, r2); !slices.Equal(diff, []string{"absent"}) {
			t.Fatalf("Inspect after Remove = %q", diff)
		}
	})
}
