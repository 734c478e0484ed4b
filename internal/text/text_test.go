package text

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

// An error's end often says what to do: CutMiddle keeps the head (what failed) and the tail
// (the fix), each cut at a word where one is near, joined by " … ", the whole at most max bytes.
func TestCutMiddleKeepsTheHeadAndTheTail(t *testing.T) {
	fix := `resources[1] file "/srv/app/config.toml": apply: parent directory /srv/app does not exist: declare it as a directory resource before this one (the host never creates one implicitly)`
	for _, tc := range []struct {
		name       string
		in         string
		max        int
		want       string // exactly, when set
		head, tail string // else its start and end
	}{
		{name: "short text passes", in: "hello", max: 10, want: "hello"},
		{name: "exactly max passes", in: "hello", max: 5, want: "hello"},
		{name: "zero max is empty", in: "abc", max: 0, want: ""},
		{name: "a max too small for the ellipsis keeps the head", in: "abcdefghij", max: 6, want: "abcdef"},
		{name: "the fix at the end is kept", in: fix, max: 160,
			head: `resources[1] file "/srv/app/config.toml": apply: parent`, tail: "declare it as a directory resource before this one (the host never creates one implicitly)"},
		{name: "a tighter bound still keeps what failed and the end", in: fix, max: 100,
			head: `resources[1] file`, tail: "(the host never creates one implicitly)"},
		{name: "words are cut where they end", in: strings.TrimSpace(strings.Repeat("word ", 40)), max: 60, want: "word word word word … word word word word word word"},
		{name: "text without spaces is cut anywhere", in: strings.Repeat("x", 100), max: 25, want: strings.Repeat("x", 8) + " … " + strings.Repeat("x", 12)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := CutMiddle(tc.in, tc.max)
			if len(got) > tc.max || !utf8.ValidString(got) {
				t.Fatalf("CutMiddle(%q, %d) = %q: %d bytes or invalid UTF-8", tc.in, tc.max, got, len(got))
			}
			if tc.want != "" || tc.head == "" {
				if got != tc.want {
					t.Fatalf("CutMiddle(%q, %d) = %q, want %q", tc.in, tc.max, got, tc.want)
				}
				return
			}
			if !strings.HasPrefix(got, tc.head) || !strings.HasSuffix(got, tc.tail) || !strings.Contains(got, " … ") {
				t.Fatalf("CutMiddle(…, %d) = %q, want %q … %q", tc.max, got, tc.head, tc.tail)
			}
		})
	}
}

// Whatever the text and the bound, CutMiddle's result is at most max bytes of valid UTF-8, made
// of a head of the text and a tail of it.
func TestCutMiddleIsBoundedForEveryMax(t *testing.T) {
	for _, in := range []string{strings.Repeat("é", 50), strings.Repeat("ab cd ", 20), "one two three four five six seven eight nine ten", "😀" + strings.Repeat("z", 40) + "😀"} {
		for max := 0; max <= len(in)+1; max++ {
			got := CutMiddle(in, max)
			if len(got) > max || !utf8.ValidString(got) {
				t.Fatalf("CutMiddle(%q, %d) = %q: %d bytes or invalid UTF-8", in, max, got, len(got))
			}
			head, tail, cut := strings.Cut(got, " … ")
			if len(in) <= max && got != in {
				t.Fatalf("CutMiddle(%q, %d) = %q, want it whole", in, max, got)
			}
			if cut && (!strings.HasPrefix(in, head) || !strings.HasSuffix(in, tail)) {
				t.Fatalf("CutMiddle(%q, %d) = %q: not a head and a tail of it", in, max, got)
			}
		}
	}
}
