package text

import (
	"errors"
	"io/fs"
	"net/url"
	"strings"
	"testing"
)

func TestRedactHidesTheCredentialsOfEveryURL(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"user and password", "nats://mesh:S3cret@10.0.0.1:4222", "nats://mesh:xxxxx@10.0.0.1:4222"},
		{"token alone", "nats://s.3cr3t-token@bus.example:4222", "nats://xxxxx@bus.example:4222"},
		{"tls scheme", "tls://mesh:S3cret@bus.example", "tls://mesh:xxxxx@bus.example"},
		{"ipv6 host", "nats://mesh:S3cret@[::1]:4222", "nats://mesh:xxxxx@[::1]:4222"},
		{"a list of servers", "nats://a:S3cret@h1:4222,nats://tok3n@h2:4222,nats://h3:4222",
			"nats://a:xxxxx@h1:4222,nats://xxxxx@h2:4222,nats://h3:4222"},
		{"inside a log line", `level=WARN msg="link: lost the bus" bus=nats://mesh:S3cret@h:4222 err=EOF`,
			`level=WARN msg="link: lost the bus" bus=nats://mesh:xxxxx@h:4222 err=EOF`},
		{"inside quotes", `connect to "nats://mesh:S3cret@h:4222": refused`, `connect to "nats://mesh:xxxxx@h:4222": refused`},
		{"an @ in the password", "nats://mesh:p@ss@h:4222", "nats://mesh:xxxxx@h:4222"},
		{"a raw slash in the password", `parse "nats://mesh:pa/ss@h": invalid port`, `parse "nats://mesh:xxxxx@h": invalid port`},
		{"a path after the host keeps its @", "see https://h/docs and me@example.com", "see https://h/docs and me@example.com"},
		{"no credentials", "nats://127.0.0.1:4222", "nats://127.0.0.1:4222"},
		{"no URL", "user@example.com said: a:b@c", "user@example.com said: a:b@c"},
		{"empty", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Redact(tc.in); got != tc.want {
				t.Fatalf("Redact(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestRedactErrorHidesTheURLAndKeepsTheChain(t *testing.T) {
	//lint:ignore SA1007 the URL is invalid on purpose: its parse error quotes it
	_, perr := url.Parse("nats://mesh:S3cret@h:bad")
	if perr == nil || !strings.Contains(perr.Error(), "S3cret") {
		t.Fatalf("url.Parse error %v no longer quotes the URL: this test needs another example", perr)
	}
	wrapped := errors.Join(perr, fs.ErrNotExist)
	err := RedactError(wrapped)
	if strings.Contains(err.Error(), "S3cret") || !strings.Contains(err.Error(), "mesh:xxxxx@h") {
		t.Errorf("RedactError: %q", err)
	}
	var ue *url.Error
	if !errors.Is(err, fs.ErrNotExist) || !errors.As(err, &ue) {
		t.Errorf("RedactError lost the chain: %v", err)
	}
	if RedactError(nil) != nil {
		t.Error("RedactError(nil) is not nil")
	}
}
