package text

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestBoundQuotesAtMost64BytesOnACharacterBoundary(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"short text passes", "v1.2.0", "v1.2.0"},
		{"64 bytes pass", strings.Repeat("a", 64), strings.Repeat("a", 64)},
		{"65 bytes are cut and marked", strings.Repeat("a", 65), strings.Repeat("a", 64) + "…"},
		{"a character across the cut is left out whole", strings.Repeat("a", 63) + "é" + "zz", strings.Repeat("a", 63) + "…"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Bound(tc.in)
			if got != tc.want {
				t.Errorf("Bound(%q) = %q, want %q", tc.in, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("Bound(%q) = %q is not valid UTF-8", tc.in, got)
			}
		})
	}
}

func TestPluralIsOneOnlyForOne(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{{0, "failures"}, {1, "failure"}, {2, "failures"}, {-1, "failures"}} {
		if got := Plural(tc.n, "failure", "failures"); got != tc.want {
			t.Errorf("Plural(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}
