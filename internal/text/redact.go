package text

import (
	"strings"
	"unicode"
)

// Bus URLs may carry credentials (nats://user:password@host, or nats://token@host), and a URL
// finds its way into log lines, errors, the output the launcher keeps and the heartbeats that
// carry it off the machine. Redact is the one rule for all of them.

// redacted replaces a URL's password, or its whole user part when there is no password (for
// NATS that is a token).
const redacted = "xxxxx"

// Redact returns s with the credentials of every URL in it replaced by "xxxxx":
// "nats://mesh:secret@h:4222" becomes "nats://mesh:xxxxx@h:4222" and "nats://token@h" becomes
// "nats://xxxxx@h". The user name before a password stays, to say who was refused. s may be a
// URL, a comma-separated list of them, or any text; text without "://" is returned as is.
func Redact(s string) string {
	if !strings.Contains(s, "://") {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	rest := s
	for {
		i := strings.Index(rest, "://")
		if i < 0 {
			b.WriteString(rest)
			return b.String()
		}
		b.WriteString(rest[:i+3])
		rest = rest[i+3:]
		// The user part ends at the last '@' before the URL ends or the next URL begins. A
		// password should have no raw '/', '?' or '#', but one that has must not leak through
		// an error that quotes it, so those do not end the search: this errs toward hiding.
		end := strings.IndexFunc(rest, endsURL)
		if end < 0 {
			end = len(rest)
		}
		if next := strings.Index(rest[:end], "://"); next >= 0 {
			end = next
		}
		at := strings.LastIndexByte(rest[:end], '@')
		if at < 0 {
			continue
		}
		if user, _, ok := strings.Cut(rest[:at], ":"); ok {
			b.WriteString(user + ":" + redacted)
		} else {
			b.WriteString(redacted)
		}
		rest = rest[at:]
	}
}

// endsURL reports whether r cannot be part of a URL, even a malformed one quoted in an error.
func endsURL(r rune) bool {
	switch r {
	case '"', '<', '>', '`':
		return true
	}
	return unicode.IsSpace(r) || unicode.IsControl(r)
}

// RedactError returns err with Redact applied to its text; errors.Is and errors.As still see
// err. Errors from NATS and net/url may quote the URL they were given.
func RedactError(err error) error {
	if err == nil {
		return nil
	}
	return redactedError{err}
}

type redactedError struct{ err error }

func (e redactedError) Error() string { return Redact(e.err.Error()) }
func (e redactedError) Unwrap() error { return e.err }
