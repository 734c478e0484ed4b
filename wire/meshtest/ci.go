package meshtest

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/internal/emulator"
)

// UnderCI reports whether the tests run in CI: CI set to anything but "", "0" or "false" (as CI
// services and .ci/run set it).
func UnderCI() bool {
	switch strings.ToLower(os.Getenv("CI")) {
	case "", "0", "false":
		return false
	}
	return true
}

// SkipUnlessCI skips tb, saying why, when a tool or prerequisite it needs is missing or broken
// here; under CI it fails it instead. .ci/run installs everything the tests need, so there a
// missing prerequisite is a broken machine or a broken test, and a skip would hide it.
func SkipUnlessCI(tb testing.TB, format string, args ...any) {
	tb.Helper()
	why := fmt.Sprintf(format, args...)
	if UnderCI() {
		tb.Fatalf("%s (CI is set: .ci/run installs what the tests need, so this fails instead of skipping)", why)
	}
	tb.Skip(why)
}

// RequireArch skips tb unless this machine runs linux/<goarch> binaries (natively, or through
// qemu-user under binfmt_misc: internal/emulator runs a tiny program built for it), saying what
// to install; under CI it fails instead, .ci/run having installed the emulator.
func RequireArch(tb testing.TB, goarch string) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := emulator.Runs(ctx, goarch); err != nil {
		SkipUnlessCI(tb, "needs linux/%s binaries to run here: %v", goarch, err)
	}
}
