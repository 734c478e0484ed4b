package wire

import (
	"os"
	"strings"
	"testing"

	"github.com/novox/mesh-host/rollback"
)

// One version rule for all: a target names a version exactly as a manifest does (ValidVersion),
// so a target delivery would refuse is refused where it is read.
func TestParseTargetUsesTheManifestsVersionRule(t *testing.T) {
	for _, tc := range []struct {
		version string
		ok      bool
	}{
		{"v1.4.0", true},
		{"v1.5.0-rc.1", true},
		{"v1.4.0+build.7", false},
		{"v1.4.0-rc.1+abc", false},
		{"v1.4", false},
		{"1.4.0", false},
		{"", false},
		{"v1.0.0-" + strings.Repeat("a", MaxVersionBytes-7), true},
		{"v1.0.0-" + strings.Repeat("a", MaxVersionBytes-6), false},
	} {
		t.Run(shortName(tc.version), func(t *testing.T) {
			tgt, err := ParseTarget(Target{Version: tc.version, Seq: 1, Expires: "2026-12-06T12:00:00Z"}.Marshal())
			if (err == nil) != tc.ok {
				t.Fatalf("ParseTarget(%q) = %v, want ok=%v", tc.version, err, tc.ok)
			}
			if (err == nil) != ValidVersion(tc.version) {
				t.Fatalf("ParseTarget and ValidVersion disagree on %q", tc.version)
			}
			if err == nil && tgt.Version != tc.version {
				t.Fatalf("version %q read as %q", tc.version, tgt.Version)
			}
			if err != nil && !strings.Contains(err.Error(), "no +build") {
				t.Fatalf("error %q does not say the rule", err)
			}
		})
	}
}

// The launcher names version directories by the same rule (rollback.ScanVersions), or a version
// could be targeted that no directory can hold.
func TestValidVersionIsTheRuleVersionDirectoriesUse(t *testing.T) {
	root := t.TempDir()
	names := []string{"v1.4.0", "v1.5.0-rc.1", "v1.4.0+b", "v1.4", "1.4.0", "v01.4.0", "v1.4.0-", "v1.0.0-" + strings.Repeat("a", MaxVersionBytes-7)}
	for _, v := range names {
		if err := os.MkdirAll(rollback.VersionDir(root, v), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	dirs, err := rollback.ScanVersions(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		if ValidVersion(d.Name) != d.Version {
			t.Errorf("%q: wire.ValidVersion %v, a version directory %v", d.Name, ValidVersion(d.Name), d.Version)
		}
	}
	if len(dirs) != len(names) {
		t.Errorf("ScanVersions listed %d entries, want %d", len(dirs), len(names))
	}
}

func shortName(v string) string {
	if len(v) > 20 {
		return v[:20] + "…"
	}
	return v
}
