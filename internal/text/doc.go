// Package text has one job: making text that came from outside a process safe to keep, send
// and show — bounded (Cut, CutMiddle, Bound), printable on a terminal (Printable,
// PrintableJSON), with the credentials in URLs hidden (Redact) — and the one small wording
// helper the commands share (Plural). The launcher, the host, the release side and the wire
// contract all use it, so there is one rule for all of them; it imports nothing of this module,
// so any package may import it without linking another side.
package text
