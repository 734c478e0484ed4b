package layout

import (
	"strings"
	"testing"
)

func TestValidVersionAcceptsOnlyCanonicalSemverWithinTheLimit(t *testing.T) {
	for v, want := range map[string]bool{
		"v1.4.0": true, "v1.5.0-rc.1": true, "v2.0.0": true,
		"v1.4.0+build.7": false, "v1.4": false, "1.4.0": false, "v01.4.0": false, "v1.4.0-": false, "": false,
		"v1.0.0-" + strings.Repeat("a", MaxVersionBytes-7): true,
		"v1.0.0-" + strings.Repeat("a", MaxVersionBytes-6): false,
	} {
		if got := ValidVersion(v); got != want {
			t.Errorf("ValidVersion(%.20q…) = %v, want %v", v, got, want)
		}
	}
	if !strings.Contains(VersionRule, "128") || MaxVersionBytes != 128 {
		t.Errorf("VersionRule %q does not state MaxVersionBytes %d", VersionRule, MaxVersionBytes)
	}
}
