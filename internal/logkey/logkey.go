// Package logkey makes loggers whose lines carry each key once. slog's handlers add every
// attribute they are given, so a sub-component's logger, made by With on its owner's, wrote
// `component=host … component=link`, and a record's `version=` beside its logger's. Here an
// attribute replaces an earlier one of the same key: With moves the key to the end with its
// new value (`node=n1 component=link`), and a record's own attribute wins over its logger's.
package logkey

import (
	"context"
	"io"
	"log/slog"
	"slices"
)

// Text is slog's text handler writing to w, each key once.
func Text(w io.Writer, opts *slog.HandlerOptions) *slog.Logger {
	return slog.New(Unique(slog.NewTextHandler(w, opts)))
}

// Sub is l for a sub-component: its "component" replaces l's.
func Sub(l *slog.Logger, component string) *slog.Logger {
	return slog.New(Unique(l.Handler())).With("component", component)
}

// Unique wraps h so that each key is written once per line. The attributes h already holds
// are h's; only those added through the wrapper are replaced (so wrap the handler before any
// With). A handler Unique made is returned as it is.
func Unique(h slog.Handler) slog.Handler {
	if u, ok := h.(*unique); ok {
		return u
	}
	return &unique{base: h, h: h}
}

type unique struct {
	base  slog.Handler // without attrs
	attrs []slog.Attr  // the logger's, one per key, in the order last given
	h     slog.Handler // base.WithAttrs(attrs), made once per With
}

func (u *unique) Enabled(ctx context.Context, l slog.Level) bool { return u.h.Enabled(ctx, l) }

func (u *unique) WithAttrs(as []slog.Attr) slog.Handler {
	if len(as) == 0 {
		return u
	}
	merged := slices.Clone(u.attrs)
	for _, a := range as {
		merged = slices.DeleteFunc(merged, func(b slog.Attr) bool { return b.Key == a.Key })
		merged = append(merged, a)
	}
	return &unique{base: u.base, attrs: merged, h: u.base.WithAttrs(merged)}
}

// WithGroup nests what follows: keys inside the group are kept once among themselves, apart
// from those outside it.
func (u *unique) WithGroup(name string) slog.Handler {
	if name == "" {
		return u
	}
	g := u.h.WithGroup(name)
	return &unique{base: g, h: g}
}

func (u *unique) Handle(ctx context.Context, r slog.Record) error {
	var own []slog.Attr
	r.Attrs(func(a slog.Attr) bool { own = append(own, a); return true })
	repeats := false
	for i, a := range own {
		if slices.ContainsFunc(own[i+1:], func(b slog.Attr) bool { return b.Key == a.Key }) ||
			slices.ContainsFunc(u.attrs, func(b slog.Attr) bool { return b.Key == a.Key }) {
			repeats = true
			break
		}
	}
	if !repeats {
		return u.h.Handle(ctx, r)
	}
	// The record's attribute is the more specific: it wins, the last of its own repeats too.
	h, kept := u.h, u.attrs
	var last []slog.Attr
	for _, a := range own {
		last = slices.DeleteFunc(last, func(b slog.Attr) bool { return b.Key == a.Key })
		last = append(last, a)
		kept = slices.DeleteFunc(slices.Clone(kept), func(b slog.Attr) bool { return b.Key == a.Key })
	}
	if len(kept) != len(u.attrs) {
		h = u.base.WithAttrs(kept)
	}
	out := slog.NewRecord(r.Time, r.Level, r.Message, r.PC)
	out.AddAttrs(last...)
	return h.Handle(ctx, out)
}

// Repeated returns the keys that a line of slog's text output carries more than once, for
// tests that read real log output. A quoted value may hold spaces, `=` and escaped quotes.
func Repeated(line string) []string {
	seen := map[string]bool{}
	var rep []string
	for s := line; s != ""; {
		for s != "" && s[0] == ' ' {
			s = s[1:]
		}
		eq := 0
		for eq < len(s) && s[eq] != '=' && s[eq] != ' ' {
			eq++
		}
		key := s[:eq]
		s = s[eq:]
		if s != "" && s[0] == '=' {
			s = s[1:]
			if s != "" && s[0] == '"' {
				i := 1
				for i < len(s) && s[i] != '"' {
					if s[i] == '\\' {
						i++
					}
					i++
				}
				s = s[min(i+1, len(s)):]
			} else {
				i := 0
				for i < len(s) && s[i] != ' ' {
					i++
				}
				s = s[i:]
			}
		}
		if key == "" {
			continue
		}
		if seen[key] && !slices.Contains(rep, key) {
			rep = append(rep, key)
		}
		seen[key] = true
	}
	return rep
}
