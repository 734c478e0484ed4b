// Package text makes text that came from outside a process safe to keep, send and show.
//
// It is made bounded (Cut, CutMiddle, Bound), printable on a terminal (Printable, PrintableJSON),
// with the credentials in URLs hidden (Redact); and it holds the one small wording helper the
// commands share (Plural). The launcher, the host, the release side and the wire contract all use
// it, so there is one rule for all of them; it imports nothing of this module, so any package may
// import it without linking another side.
package text
