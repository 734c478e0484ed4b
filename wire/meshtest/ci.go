package meshtest

import (
	"fmt"
	"os"
	"strings"
	"testing"
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
