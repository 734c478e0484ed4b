package deliver

import (
	"context"
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire/meshtest"
)

// versionsOnTmpfs mounts a tmpfs of size bytes on h's versions/ (so records.db stays on the
// real disk) and returns a function that resizes it. It skips the test where mounting is not
// allowed (fails it under CI, which runs as root).
func versionsOnTmpfs(t *testing.T, h *harness, size int64) (resize func(size int64)) {
	t.Helper()
	if os.Geteuid() != 0 {
		meshtest.SkipUnlessCI(t, "mounting a small tmpfs needs root (CAP_SYS_ADMIN); run the tests as root to cover a real full disk (CI runs as root)")
	}
	dir := rollback.VersionsDir(h.root)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	opts := func(size int64) string { return "size=" + strconv.FormatInt(size, 10) + ",mode=0755" }
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, opts(size)); err != nil {
		meshtest.SkipUnlessCI(t, "cannot mount a tmpfs on %s here (%v); the env seam tests cover the same logic", dir, err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, unix.MNT_DETACH); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return func(size int64) {
		if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_REMOUNT, opts(size)); err != nil {
			t.Fatalf("resize the tmpfs on %s: %v", dir, err)
		}
	}
}

func TestDeliverOnA28MiBTmpfsStagesA12MBRelease(t *testing.T) {
	h := newHarness(t, nil)
	versionsOnTmpfs(t, h, 28<<20)
	bin := fakehost(t, v1, "ok", runtime.GOARCH)
	h.release(v1, withTail(bin, 12<<20-len(bin))) // does not compress: an 11 MiB archive
	if err := h.d.Deliver(context.Background(), v1, nil); err != nil {
		t.Fatal(err)
	}
	if !h.d.Have(v1) {
		t.Fatal("not staged")
	}
}

// A disk that fills up while staging (space taken after the check, here by a free-space seam
// that reports 1 GiB on a small tmpfs) is the machine's problem: the attempt fails as no-space,
// retried with backoff, never refused for good; once there is room the next attempt stages.
func TestDiskFullWhileStagingIsRetriedNotRefused(t *testing.T) {
	bin := func(t *testing.T) []byte { return fakehost(t, v1, "ok", runtime.GOARCH) }
	cases := []struct {
		name  string
		size  int64
		bin   func(t *testing.T) []byte
		says  string
		check bool // free space is reported by the file system, not the seam
	}{
		{name: "TestDiskFullWhileExtractingIsRetriedNotRefused", size: 8 << 20, says: "while extracting",
			bin: func(t *testing.T) []byte { return padded(bin(t), 12<<20-len(bin(t))) }}, // a 5 MiB archive
		{name: "TestDiskFullWhileDownloadingIsRetriedNotRefused", size: 2 << 20, says: "while writing the download",
			bin: func(t *testing.T) []byte { return withTail(bin(t), 4<<20) }},
		{name: "TestTooLittleRoomForTheBinaryIsFoundBeforeExtracting", size: 16 << 20, says: "the binary", check: true,
			bin: func(t *testing.T) []byte { return padded(bin(t), 12<<20-len(bin(t))) }},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, func(c *Config) { c.Backoff = Backoff{Initial: 10 * time.Millisecond, Max: 20 * time.Millisecond} })
			resize := versionsOnTmpfs(t, h, c.size)
			h.release(v1, c.bin(t))
			if !c.check {
				h.d.env.freeSpace = func(string) (uint64, error) { return 1 << 30, nil }
			}
			err := h.d.Deliver(context.Background(), v1, nil)
			var e *Error
			if !errors.As(err, &e) || e.Kind != KindNoSpace || e.Kind.Permanent() {
				t.Fatalf("got %v, want a no-space failure that is retried", err)
			}
			t.Log(err)
			if !strings.Contains(err.Error(), c.says) || !strings.Contains(err.Error(), "free some space") {
				t.Fatalf("error %q does not say %q and how to fix it", err, c.says)
			}
			if ents := h.versionsEntries(); len(ents) != 0 {
				t.Fatalf("after a failure versions/ holds %v, want nothing", ents)
			}
			resize(64 << 20)
			time.Sleep(time.Until(e.RetryAt))
			if err := h.d.Deliver(context.Background(), v1, nil); err != nil {
				t.Fatalf("after freeing space: %v", err)
			}
			if !h.d.Have(v1) {
				t.Fatal("not staged")
			}
		})
	}
}
