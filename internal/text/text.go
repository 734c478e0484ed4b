package text

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Text that comes from outside a process — a host's output kept in the records, a heartbeat
// field, an error built from a declaration — is bounded before it is stored or sent, and made
// printable before it is shown.

// Cut returns s if it is at most max bytes long; otherwise its head, cut on a UTF-8 boundary,
// and a marker saying how many bytes were cut, the whole at most max bytes. A max smaller than
// the marker gets the head alone.
func Cut(s string, max int) string {
	if max <= 0 {
		return ""
	}
	if len(s) <= max {
		return s
	}
	// The marker is sized for the largest count it could say, so the real one fits too.
	keep := max - len(cutMarker(len(s)))
	if keep < 0 {
		keep = max
	}
	// Step back to a rune boundary so the result stays valid UTF-8.
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	if keep+len(cutMarker(len(s))) > max {
		return s[:keep]
	}
	return s[:keep] + cutMarker(len(s)-keep)
}

func cutMarker(n int) string { return fmt.Sprintf(" …[cut %d bytes]", n) }

// middleMarker joins what CutMiddle keeps.
const middleMarker = " … "

// wordSnap is how far CutMiddle looks for a space to cut at, so as not to cut a word in two.
const wordSnap = 16

// CutMiddle returns s if it is at most max bytes long; otherwise its head and its tail joined by
// " … ", the whole at most max bytes. The tail gets the larger share: an error's end often says
// what to do ("…: declare it as a directory resource before this one"), its start what failed.
// Each part is cut on a UTF-8 boundary, and at a space when one is within a few bytes. A max too
// small for the marker gets the head alone, as Cut.
func CutMiddle(s string, max int) string {
	if len(s) <= max {
		return s
	}
	budget := max - len(middleMarker)
	if budget < 2 {
		return Cut(s, max)
	}
	tailLen := budget * 3 / 5
	// The head is s[:h]: back to a rune boundary, then to a space if one is near.
	h := budget - tailLen
	for h > 0 && !utf8.RuneStart(s[h]) {
		h--
	}
	if s[h] != ' ' {
		lo := h - wordSnap
		if lo < 1 {
			lo = 1
		}
		if lo < h {
			if i := strings.LastIndexByte(s[lo:h], ' '); i >= 0 {
				h = lo + i
			}
		}
	}
	// The tail is s[t:]: on to a rune boundary, then past a space if one is near.
	t := len(s) - tailLen
	for t < len(s) && !utf8.RuneStart(s[t]) {
		t++
	}
	if hi := min(t+wordSnap, len(s)-1); s[t-1] != ' ' && t < hi {
		if i := strings.IndexByte(s[t:hi], ' '); i >= 0 {
			t += i + 1
		}
	}
	return strings.TrimRight(s[:h], " ") + middleMarker + strings.TrimLeft(s[t:], " ")
}

// Printable returns s with everything that could drive a terminal or hide text written as a
// visible escape: control characters (newlines and tabs too, so one field stays one line), DEL,
// the C1 controls, Unicode line and paragraph separators and bidirectional overrides; invalid
// UTF-8 becomes U+FFFD. Printable text passes unchanged.
func Printable(s string) string {
	if isPrintable(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteRune(utf8.RuneError)
		case unsafeRune(r):
			if r < 0x100 {
				fmt.Fprintf(&b, `\x%02x`, r)
			} else {
				fmt.Fprintf(&b, `\u%04x`, r)
			}
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func isPrintable(s string) bool {
	for _, r := range s {
		if r == utf8.RuneError || unsafeRune(r) {
			return false
		}
	}
	return true
}

func unsafeRune(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r < 0xa0:
		return true
	case r == 0x2028, r == 0x2029: // line and paragraph separators
		return true
	case r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == 0x200e, r == 0x200f: // bidi
		return true
	}
	return false
}

// PrintableJSON rewrites JSON so that every character Printable would escape is written as a
// \u escape: encoding/json escapes C0 controls and U+2028/U+2029 but writes DEL, the C1
// controls (U+009B is CSI on some terminals) and bidirectional overrides raw. Outside strings
// JSON is plain ASCII, so only string contents change and every value decodes as before. For
// JSON built from outside text and printed where a terminal may read it.
func PrintableJSON(b []byte) []byte {
	if Printable(string(b)) == string(b) {
		return b
	}
	var out strings.Builder
	out.Grow(len(b) + 64)
	for _, r := range string(b) {
		if r != '\n' && Printable(string(r)) != string(r) {
			fmt.Fprintf(&out, `\u%04x`, r)
			continue
		}
		out.WriteRune(r)
	}
	return []byte(out.String())
}
