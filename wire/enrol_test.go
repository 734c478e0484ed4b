package wire

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

const testCreds = "-----BEGIN NATS USER JWT-----\neyJ0eXAiOiJKV1QifQ.e30.sig\n------END NATS USER JWT------\n\n-----BEGIN USER NKEY SEED-----\nSUAEXAMPLE\n------END USER NKEY SEED------\n"

func goodToken() EnrolToken {
	var id [tokenIDBytes]byte
	var secret [tokenSecretBytes]byte
	for i := range secret {
		secret[i] = byte(i)
	}
	id[0] = 0xab
	return EnrolToken{
		URLs:     []string{"tls://bus.example:4222", "nats://10.0.0.1:4222"},
		CASHA256: strings.Repeat("0f", 32),
		Prefix:   "mesh",
		Node:     "web-01",
		ID:       NewTokenID(id),
		Secret:   NewTokenSecret(secret),
		Expires:  time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC),
		Creds:    testCreds,
	}
}

func TestTokenRoundTrips(t *testing.T) {
	want := goodToken()
	s, err := FormatToken(want)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(s, TokenPrefix) || strings.ContainsAny(s, "=+/ \n") {
		t.Fatalf("token %q is not mesh-enrol-1. and base64url without padding", s)
	}
	got, err := ParseToken("  " + s + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if !got.Expires.Equal(want.Expires) || got.Creds != want.Creds || got.ID != want.ID || got.Secret != want.Secret ||
		strings.Join(got.URLs, ",") != strings.Join(want.URLs, ",") || got.Node != want.Node || got.CASHA256 != want.CASHA256 {
		t.Fatalf("round trip: got %+v, want %+v", got, want)
	}
	// An empty node is a token for any node.
	any := goodToken()
	any.Node = ""
	if s, err := FormatToken(any); err != nil {
		t.Fatal(err)
	} else if _, err := ParseToken(s); err != nil {
		t.Fatal(err)
	}
}

// encode makes a token's text from any JSON, as a forger or a damaged copy would.
func encode(v any) string {
	b, _ := json.Marshal(v)
	return TokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func edit(f func(m map[string]any)) string {
	b, _ := json.Marshal(goodToken())
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	f(m)
	return encode(m)
}

// Each refusal names what is wrong, and none quotes the secret or the credentials.
func TestParseTokenRefuses(t *testing.T) {
	good, _ := FormatToken(goodToken())
	body := strings.TrimPrefix(good, TokenPrefix)
	for _, tc := range []struct {
		name, text, want string
	}{
		{"empty", "", "does not start with"},
		{"another format", "mesh-enrol-2." + body, `format "2"`},
		{"not a token", "hello", "does not start with"},
		{"too long", TokenPrefix + strings.Repeat("A", MaxTokenBytes), "more than the 8192"},
		{"padding", good + "==", "not base64url"},
		{"standard base64", TokenPrefix + base64.StdEncoding.EncodeToString([]byte(`{"urls":[]}`)), "not base64url"},
		{"cut short", good[:len(good)-7], ""}, // JSON or base64 error, either names it
		{"not JSON", TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte("hello")), "its JSON"},
		{"unknown key", edit(func(m map[string]any) { m["admin"] = true }), `admin: unknown field`},
		{"key in another case", edit(func(m map[string]any) { m["Node"] = "db-01" }), `"Node" is not a field`},
		{"duplicate key", TokenPrefix + base64.RawURLEncoding.EncodeToString([]byte(`{"node":"a","node":"b"}`)), `duplicate key "node"`},
		{"no urls", edit(func(m map[string]any) { m["urls"] = []string{} }), "urls is empty"},
		{"too many urls", edit(func(m map[string]any) { m["urls"] = make([]string, MaxTokenURLs+1) }), "17 urls"},
		{"http url", edit(func(m map[string]any) { m["urls"] = []string{"http://bus:4222"} }), "scheme"},
		{"url without host", edit(func(m map[string]any) { m["urls"] = []string{"tls://:4222"} }), "no host"},
		{"url with password", edit(func(m map[string]any) { m["urls"] = []string{"tls://u:hunter2@bus:4222"} }), "carries a user or password"},
		{"long url", edit(func(m map[string]any) { m["urls"] = []string{"tls://" + strings.Repeat("a", 600)} }), "more than 512"},
		{"short ca", edit(func(m map[string]any) { m["ca_sha256"] = "abc" }), "ca_sha256: 3 characters"},
		{"upper-case ca", edit(func(m map[string]any) { m["ca_sha256"] = strings.Repeat("0F", 32) }), "ca_sha256: \"F\""},
		{"no prefix", edit(func(m map[string]any) { m["prefix"] = "" }), "prefix: the prefix is empty"},
		{"dotted prefix", edit(func(m map[string]any) { m["prefix"] = "a.b" }), `holds "."`},
		{"bad node", edit(func(m map[string]any) { m["node"] = "web.01" }), `node: node id "web.01" contains "."`},
		{"bad id", edit(func(m map[string]any) { m["id"] = "x" }), "id: 1 characters"},
		{"short secret", edit(func(m map[string]any) { m["secret"] = "c2VjcmV0" }), "secret is not 32 bytes"},
		{"no expiry", edit(func(m map[string]any) { delete(m, "expires") }), "expires is missing"},
		{"bad expiry", edit(func(m map[string]any) { m["expires"] = "tomorrow" }), "its JSON"},
		{"no creds", edit(func(m map[string]any) { m["creds"] = "" }), "creds is empty"},
		{"not creds", edit(func(m map[string]any) { m["creds"] = "password" }), "not a NATS .creds"},
		{"huge creds", edit(func(m map[string]any) { m["creds"] = strings.Repeat("x", maxCredsBytes+1) }), "creds is 4097 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseToken(tc.text)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "enrolment token: ") || !strings.Contains(msg, tc.want) {
				t.Fatalf("error %q does not say %q", msg, tc.want)
			}
			if strings.Contains(msg, goodToken().Secret) || strings.Contains(msg, "SUAEXAMPLE") || strings.Contains(msg, "hunter2") {
				t.Fatalf("error %q quotes a secret", msg)
			}
			if len(msg) > 600 {
				t.Fatalf("error is %d bytes: %q", len(msg), msg)
			}
		})
	}
}

func TestFormatTokenRefusesWhatParseRefuses(t *testing.T) {
	tok := goodToken()
	tok.Secret = "short"
	if _, err := FormatToken(tok); err == nil || !strings.Contains(err.Error(), "secret") {
		t.Fatalf("FormatToken with a bad secret: %v", err)
	}
	tok = goodToken()
	tok.URLs = nil
	for i := 0; i < MaxTokenURLs; i++ {
		tok.URLs = append(tok.URLs, "tls://"+strings.Repeat("h", 400)+".example:4222")
	}
	if _, err := FormatToken(tok); err == nil || !strings.Contains(err.Error(), "more than the 8192") {
		t.Fatalf("FormatToken of a token over the bound: %v", err)
	}
}

func TestParseEnrolRequestRefuses(t *testing.T) {
	good, _ := FormatToken(goodToken())
	key := "U" + strings.Repeat("A", 55)
	req := func(f func(r *EnrolRequest)) []byte {
		r := EnrolRequest{Token: good, Node: "web-01", PublicKey: key}
		f(&r)
		b, _ := json.Marshal(r)
		return b
	}
	if r, err := ParseEnrolRequest(req(func(*EnrolRequest) {})); err != nil || r.Node != "web-01" {
		t.Fatalf("good request: %+v %v", r, err)
	}
	for _, tc := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"too big", make([]byte, MaxEnrolRequestBytes+1), "more than the"},
		{"unknown key", []byte(`{"token":"x","node":"n","public_key":"` + key + `","admin":true}`), `admin: unknown field`},
		{"no node", req(func(r *EnrolRequest) { r.Node = "" }), "node: node id is empty"},
		{"seed instead of key", req(func(r *EnrolRequest) { r.PublicKey = "SU" + strings.Repeat("A", 56) }), "public_key"},
		{"account key", req(func(r *EnrolRequest) { r.PublicKey = "A" + strings.Repeat("A", 55) }), "public_key"},
		{"lower-case key", req(func(r *EnrolRequest) { r.PublicKey = "U" + strings.Repeat("a", 55) }), "base32"},
		{"no token", req(func(r *EnrolRequest) { r.Token = "" }), "token is empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseEnrolRequest(tc.b)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestParseEnrolReplyRefuses(t *testing.T) {
	good := EnrolReply{JWT: "eyJ.x.y", CAPEM: "-----BEGIN CERTIFICATE-----\nMII\n-----END CERTIFICATE-----\n",
		URLs: []string{"tls://bus:4222"}, Prefix: "mesh", TrustedKeys: []string{base64.StdEncoding.EncodeToString(make([]byte, 32))}}
	b, _ := json.Marshal(good)
	if _, err := ParseEnrolReply(b); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		f    func(r *EnrolReply)
		want string
	}{
		{"no jwt", func(r *EnrolReply) { r.JWT = "" }, "jwt is empty"},
		{"no CA", func(r *EnrolReply) { r.CAPEM = "" }, "ca_pem"},
		{"no urls", func(r *EnrolReply) { r.URLs = nil }, "0 urls"},
		{"bad prefix", func(r *EnrolReply) { r.Prefix = "a b" }, "prefix"},
		{"bad key", func(r *EnrolReply) { r.TrustedTargetKeys = []string{"nope"} }, "trusted_target_keys"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := good
			tc.f(&r)
			b, _ := json.Marshal(r)
			if _, err := ParseEnrolReply(b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

func TestParseRevokeRequest(t *testing.T) {
	if r, err := ParseRevokeRequest([]byte(`{"node":"web-01"}`)); err != nil || r.Node != "web-01" {
		t.Fatalf("%+v %v", r, err)
	}
	for _, b := range []string{`{}`, `{"node":"a.b"}`, `{"node":"a","x":1}`, `[]`} {
		if _, err := ParseRevokeRequest([]byte(b)); err == nil {
			t.Errorf("%s accepted", b)
		}
	}
}

func TestTokenInboxPrefixIsNotANodesInbox(t *testing.T) {
	pub := "U" + strings.Repeat("A", 55)
	if p := TokenInboxPrefix(pub); strings.HasPrefix(p, NodeInboxPrefix("")) || p != "_INBOX.enrol."+pub {
		t.Fatalf("TokenInboxPrefix = %q", p)
	}
}

// An expired token's refusal names when, for which node and with what lifetime, written as
// --ttl takes it.
func TestTokenExpiredSaysWhenForWhomAndTheLifetime(t *testing.T) {
	at := time.Date(2026, 12, 1, 21, 40, 5, 0, time.FixedZone("CET", 3600))
	for _, tc := range []struct {
		node string
		ttl  time.Duration
		want string
	}{
		{"web-01", time.Minute, "this token expired at 2026-12-01T20:40:05Z (made for web-01, ttl 1m): make a new one with mesh-release enrol-token"},
		{"", time.Hour, "this token expired at 2026-12-01T20:40:05Z (made for any node, ttl 1h): make a new one with mesh-release enrol-token"},
		{"db-2", 90 * time.Second, "this token expired at 2026-12-01T20:40:05Z (made for db-2, ttl 1m30s): make a new one with mesh-release enrol-token"},
		{"db-2", 720*time.Hour + 30*time.Minute, "this token expired at 2026-12-01T20:40:05Z (made for db-2, ttl 720h30m): make a new one with mesh-release enrol-token"},
		{"db-2", 0, "this token expired at 2026-12-01T20:40:05Z (made for db-2): make a new one with mesh-release enrol-token"},
	} {
		if got := TokenExpired(at, tc.node, tc.ttl); got != tc.want {
			t.Errorf("TokenExpired(%q, %s) = %q, want %q", tc.node, tc.ttl, got, tc.want)
		}
	}
}

// The issue: a token cut short when copied (a terminal's wrap, a missed last line) was refused
// as "its JSON: unexpected EOF", which says nothing to the operator. Cut at every length, it is
// said to be cut, with what to do, and its secret is never quoted.
func TestATokenCutShortIsSaidToBeCut(t *testing.T) {
	good, err := FormatToken(goodToken())
	if err != nil {
		t.Fatal(err)
	}
	for n := len(TokenPrefix) + 1; n < len(good); n++ {
		_, err := ParseToken(good[:n])
		if err == nil {
			t.Fatalf("cut to %d of %d bytes: accepted", n, len(good))
		}
		msg := err.Error()
		if !strings.Contains(msg, "cut short") || !strings.Contains(msg, "`mesh-release enrol-token` printed") {
			t.Fatalf("cut to %d of %d bytes: %q does not say it was cut short and what to pass", n, len(good), msg)
		}
		if strings.Contains(msg, goodToken().Secret) || len(msg) > 600 {
			t.Fatalf("cut to %d bytes: %q quotes the secret or is too long", n, msg)
		}
	}
}

// A token's root tag is read back as written; a token with none pins nothing; one of the tag's
// form that does not parse is refused, never read as no pin.
func TestTokenRootOfReadsTheTagOrRefusesIt(t *testing.T) {
	fp := "sha256:" + strings.Repeat("ab", 32)
	for _, tc := range []struct {
		name string
		tags []string
		want TokenRoot
		ok   bool
		err  string
	}{
		{"none", []string{"mesh-enrol-ttl:1h0m0s"}, TokenRoot{}, false, ""},
		{"a root", []string{"mesh-enrol-ttl:1h0m0s", TokenRoot{Version: 4, Fingerprint: fp}.Tag()}, TokenRoot{Version: 4, Fingerprint: fp}, true, ""},
		{"version 0", []string{TokenRootTag + "0:" + fp}, TokenRoot{}, false, "is not mesh-enrol-root:<version>:sha256:<64 hex digits>"},
		{"no fingerprint", []string{TokenRootTag + "4"}, TokenRoot{}, false, "is not mesh-enrol-root:"},
		{"a short fingerprint", []string{TokenRootTag + "4:sha256:abcd"}, TokenRoot{}, false, "is not mesh-enrol-root:"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok, err := TokenRootOf(tc.tags)
			if got != tc.want || ok != tc.ok || (tc.err == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.err) {
				t.Errorf("TokenRootOf = %v, %v, %v; want %v, %v, %q", got, ok, err, tc.want, tc.ok, tc.err)
			}
		})
	}
}
