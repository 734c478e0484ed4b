package logkey

import (
	"bytes"
	"log/slog"
	"slices"
	"strings"
	"testing"
)

// noTime drops the time attribute, so lines can be compared whole.
var noTime = &slog.HandlerOptions{ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey && len(groups) == 0 {
		return slog.Attr{}
	}
	return a
}}

func TestEachKeyIsWrittenOncePerLine(t *testing.T) {
	for _, tc := range []struct {
		name string
		log  func(*slog.Logger)
		want string
	}{
		{"a sub-component replaces its owner's component",
			func(l *slog.Logger) {
				Sub(l.With("component", "host", "node", "n1"), "link").Info("connected", "url", "tls://a")
			},
			`level=INFO msg=connected node=n1 component=link url=tls://a`},
		{"With twice on one key keeps the last",
			func(l *slog.Logger) { l.With("component", "host").With("component", "apply").Info("x") },
			`level=INFO msg=x component=apply`},
		{"a record's attribute wins over its logger's",
			func(l *slog.Logger) { l.With("version", "v1.0.0", "node", "n1").Info("staged", "version", "v1.2.0") },
			`level=INFO msg=staged node=n1 version=v1.2.0`},
		{"a record repeating a key keeps its last",
			func(l *slog.Logger) { l.Info("x", "err", "a", "n", 1, "err", "b") },
			`level=INFO msg=x n=1 err=b`},
		{"the owner's logger is not changed by its sub-component's",
			func(l *slog.Logger) {
				host := l.With("component", "host")
				Sub(host, "link")
				host.Info("x")
			},
			`level=INFO msg=x component=host`},
		{"a group keeps its keys apart",
			func(l *slog.Logger) { l.With("id", 1).WithGroup("g").With("id", 2).Info("x", "id", 3) },
			`level=INFO msg=x id=1 g.id=3`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			tc.log(Text(&b, noTime))
			if got := strings.TrimSuffix(b.String(), "\n"); got != tc.want {
				t.Errorf("logged\n  %s\nwant\n  %s", got, tc.want)
			}
		})
	}
}

// Without Unique, slog repeats the key: what this package is for, and what Repeated finds.
func TestRepeatedFindsTheKeysSlogWritesTwice(t *testing.T) {
	var b bytes.Buffer
	slog.New(slog.NewTextHandler(&b, nil)).With("component", "host").With("component", "link").Info(`a "quoted" msg=x`, "err", "k=v two words")
	for _, tc := range []struct {
		line string
		want []string
	}{
		{strings.TrimSpace(b.String()), []string{"component"}},
		{`time=t level=INFO msg="a b=c msg=d" x=1`, nil},
		{`msg="say \"x=1\"" x=1 x=2 y= y=3`, []string{"x", "y"}},
	} {
		if got := Repeated(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("Repeated(%q) = %q, want %q", tc.line, got, tc.want)
		}
	}
}
