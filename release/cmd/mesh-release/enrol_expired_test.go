package main

import (
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/enrol"
	"github.com/novox/mesh-host/wire"
)

// An expired token is refused by name: the token user's JWT expires with the token, so the
// server refuses its connection before the service can say why, and `mesh-host enrol` says the
// token expired, when, for which node and with what lifetime, and what to do. A valid token
// still enrols, and a spent one still gets its own refusal.
func TestAnExpiredEnrolmentTokenIsRefusedByName(t *testing.T) {
	b := startTrustedBus(t)
	b.startEnrolService(t)
	hostBin := goBuild(t, "github.com/novox/mesh-host/host/cmd/mesh-host", "v1.0.0")

	// Made 58 s ago with the shortest lifetime, 1m: they expire within 2 s.
	madeAgo := func(node string) enrol.Issued {
		t.Helper()
		iss, err := enrol.IssueToken(t.Context(), b.admin.JS, b.store, wire.NamesFor(""), enrol.TokenOptions{
			Node: node, TTL: time.Minute, URLs: []string{b.url}, CAFile: b.ca,
			Now: func() time.Time { return time.Now().Add(-58 * time.Second) },
		})
		if err != nil {
			t.Fatal(err)
		}
		return iss
	}
	forNode, forAny := madeAgo("web-09"), madeAgo("")
	valid := b.token(t, "--node", "web-11")
	time.Sleep(time.Until(forAny.Expires.Add(time.Second))) // the server's clock counts whole seconds
	expiredAt := func(iss enrol.Issued) string { return iss.Expires.UTC().Format(time.RFC3339) }

	for _, tc := range []struct {
		name   string
		args   []string
		code   int
		stderr string // exactly, when not empty
		says   string
	}{
		{name: "a token for a node used after it expired", args: []string{forNode.Token}, code: 1,
			stderr: "mesh-host enrol: this token expired at " + expiredAt(forNode) + " (made for web-09, ttl 1m): make a new one with mesh-release enrol-token\n"},
		{name: "a token for any node used after it expired", args: []string{"--node", "web-10", forAny.Token}, code: 1,
			stderr: "mesh-host enrol: this token expired at " + expiredAt(forAny) + " (made for any node, ttl 1m): make a new one with mesh-release enrol-token\n"},
		{name: "a valid token", args: []string{valid}, code: 0, says: "enrolled node web-11"},
		{name: "the valid token spent", args: []string{valid}, code: 1, says: "refused (409): token "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errOut := hostEnrol(t, hostBin, append([]string{"--root", t.TempDir()}, tc.args...)...)
			if code != tc.code {
				t.Errorf("exit %d, want %d; stdout %q, stderr %q", code, tc.code, out, errOut)
			}
			if tc.stderr != "" && errOut != tc.stderr {
				t.Errorf("stderr\n%q\nwant\n%q", errOut, tc.stderr)
			}
			if tc.says != "" && !strings.Contains(out+errOut, tc.says) {
				t.Errorf("stdout %q, stderr %q; want %q", out, errOut, tc.says)
			}
		})
	}
}
