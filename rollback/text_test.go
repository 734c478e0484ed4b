package rollback

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestCutBoundsTextAndSaysHowMuchWasCut(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"short text passes", "hello", 10, "hello"},
		{"exactly max passes", "hello", 5, "hello"},
		{"long text gets a marker", strings.Repeat("a", 100), 40, strings.Repeat("a", 21) + " …[cut 79 bytes]"},
		{"tiny max keeps the head alone", "abcdef", 3, "abc"},
		{"zero max is empty", "abc", 0, ""},
		{"cut lands on a rune boundary", strings.Repeat("é", 30), 25, "ééé" + " …[cut 54 bytes]"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Cut(tc.in, tc.max)
			if got != tc.want {
				t.Fatalf("Cut(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
			}
			if len(got) > tc.max || !utf8.ValidString(got) {
				t.Fatalf("Cut(%q, %d) = %q: %d bytes or invalid UTF-8", tc.in, tc.max, got, len(got))
			}
		})
	}
}

func TestPrintableEscapesWhatCouldDriveATerminal(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"plain text passes", "v1.2.0 running — ok", "v1.2.0 running — ok"},
		{"escape sequence", "v1\x1b[2J\x1b]0;pwned\x07", `v1\x1b[2J\x1b]0;pwned\x07`},
		{"newline and tab", "a\nb\tc\r", `a\x0ab\x09c\x0d`},
		{"DEL and C1", "a\x7fb\u009bc", `a\x7fb\x9bc`},
		{"bidi override", "abc\u202edcba", `abc\u202edcba`},
		{"invalid UTF-8", "a\xffb", "a\uFFFDb"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Printable(tc.in); got != tc.want {
				t.Fatalf("Printable(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestPrintableJSONEscapesWhatATerminalActsOnAndKeepsTheValues(t *testing.T) {
	for _, in := range []string{"plain", "csi \u009b31m", "del \x7f", "bidi \u202eevil", "esc \x1b[2J", "é ok"} {
		b, err := json.Marshal(map[string]string{"v": in})
		if err != nil {
			t.Fatal(err)
		}
		out := PrintableJSON(b)
		if got := Printable(string(out)); got != string(out) {
			t.Errorf("%q: the JSON still carries what Printable escapes: %q", in, out)
		}
		var back map[string]string
		if err := json.Unmarshal(out, &back); err != nil || back["v"] != in {
			t.Errorf("%q: decodes as %q, %v", in, back["v"], err)
		}
	}
}
