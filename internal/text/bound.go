package text

import "unicode/utf8"

// boundBytes is how much of a value read from the bus an error message quotes.
const boundBytes = 64

// Bound cuts s to at most 64 bytes (on a character boundary) and marks the cut, for quoting a
// value read from the bus in an error: a refusal names what was wrong without carrying it whole.
func Bound(s string) string {
	if len(s) <= boundBytes {
		return s
	}
	cut := boundBytes
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
