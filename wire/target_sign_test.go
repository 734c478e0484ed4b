package wire_test

import (
	"crypto/ed25519"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

var signedAt = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func TestTargetSigningTextIsTheDocumentedText(t *testing.T) {
	tg := wire.Target{Version: "v1.4.0", Seq: 1764417600000, Expires: "2026-12-06T12:00:00Z"}
	want := "mesh-host target 1\nkey=node.web-01\nversion=v1.4.0\nseq=1764417600000\nexpires=2026-12-06T12:00:00Z\n"
	if got := string(tg.SigningText("node.web-01")); got != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, want)
	}
}

func TestNewTargetSeqMovesForwardFromThePreviousValueAndTheClock(t *testing.T) {
	for _, tc := range []struct {
		name string
		prev uint64
		want uint64
	}{
		{"no previous value: the clock", 0, uint64(signedAt.UnixMilli())},
		{"an older previous value: the clock", 5, uint64(signedAt.UnixMilli())},
		{"a previous value ahead of the clock: one more", uint64(signedAt.UnixMilli()) + 10, uint64(signedAt.UnixMilli()) + 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tg, err := wire.NewTarget("fleet", "v1.4.0", tc.prev, signedAt, time.Hour, meshtest.ReleaseKey.Private)
			if err != nil {
				t.Fatal(err)
			}
			if tg.Seq != tc.want {
				t.Fatalf("seq %d, want %d", tg.Seq, tc.want)
			}
			if tg.Expires != "2026-11-29T13:00:00Z" {
				t.Fatalf("expires %s, want an hour after signing", tg.Expires)
			}
		})
	}
}

func TestTargetVerifyRefusesWhatWasNotSignedForThisKeyByATrustedKey(t *testing.T) {
	trusted := []ed25519.PublicKey{meshtest.ReleaseKey.Public}
	good, err := wire.NewTarget("node.a", "v1.4.0", 0, signedAt, time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	stranger, _ := wire.NewTarget("node.a", "v1.4.0", 0, signedAt, time.Hour, meshtest.StrangerKey.Private)
	altered := good
	altered.Version = "v9.9.9"
	later := good
	later.Expires = "2027-12-06T12:00:00Z"
	unsigned := good
	unsigned.Signature, unsigned.KeyID = "", ""
	garbage := good
	garbage.Signature = "not base64!"
	for _, tc := range []struct {
		name string
		t    wire.Target
		key  string
		want error
	}{
		{"signed for this key", good, "node.a", nil},
		{"moved to another node", good, "node.b", wire.ErrTargetBadSignature},
		{"moved to the fleet key", good, "fleet", wire.ErrTargetBadSignature},
		{"version altered", altered, "node.a", wire.ErrTargetBadSignature},
		{"expiry extended", later, "node.a", wire.ErrTargetBadSignature},
		{"unsigned", unsigned, "node.a", wire.ErrTargetUnsigned},
		{"signature not base64", garbage, "node.a", wire.ErrTargetBadSignature},
		{"an untrusted key", stranger, "node.a", wire.ErrTargetUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Through the wire: what a host reads is JSON.
			read, err := wire.ParseTarget(tc.t.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			err = read.Verify(tc.key, wire.LegacyTrust(nil, trusted), time.Now())
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
			if err != nil && !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("error %q does not name the key", err)
			}
		})
	}
}

func TestParseTargetRefusesMalformedFieldsByName(t *testing.T) {
	for _, tc := range []struct{ name, json, want string }{
		{"unsigned old form", `{"version":"v1.4.0"}`, "seq is 0"},
		{"bad expiry", `{"version":"v1.4.0","seq":1,"expires":"tomorrow","key_id":"","signature":""}`, "expires \"tomorrow\""},
		{"bad key id", `{"version":"v1.4.0","seq":1,"expires":"2026-12-06T12:00:00Z","key_id":"xyz","signature":""}`, "key_id"},
		{"unknown field", `{"version":"v1.4.0","seq":1,"expires":"2026-12-06T12:00:00Z","key_id":"","signature":"","force":true}`, "force"},
		{"long expiry quoted bounded", `{"version":"v1.4.0","seq":1,"expires":"` + strings.Repeat("x", 900) + `","key_id":"","signature":""}`, "…"},
		{"over the target's size cap", `{"version":"v1.4.0","seq":1,"expires":"` + strings.Repeat("x", 5000) + `","key_id":"","signature":""}`, "more than the 1024 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.ParseTarget([]byte(tc.json))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("ParseTarget = %v, want an error saying %q", err, tc.want)
			}
			if len(err.Error()) > 400 {
				t.Fatalf("error is %d bytes: not bounded", len(err.Error()))
			}
		})
	}
}

func TestTargetExpiry(t *testing.T) {
	tg, _ := wire.NewTarget("fleet", "v1.4.0", 0, signedAt, time.Hour, meshtest.ReleaseKey.Private)
	if tg.ExpiredAt(signedAt.Add(59 * time.Minute)) {
		t.Fatal("expired before its expiry")
	}
	if !tg.ExpiredAt(signedAt.Add(time.Hour)) {
		t.Fatal("not expired at its expiry")
	}
}

func TestWithdrawalsSignVerifyAndRefusals(t *testing.T) {
	trusted := []ed25519.PublicKey{meshtest.ReleaseKey.Public}
	w1, err := wire.Withdrawals{}.Withdraw("v1.2.0", `crashes "under load"`, signedAt, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	want := "mesh-host withdrawals 1\nseq=" + itoa(signedAt.UnixMilli()) + "\nwithdrawn=v1.2.0 2026-11-29T12:00:00Z \"crashes \\\"under load\\\"\"\n"
	if got := string(w1.SigningText()); got != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, want)
	}
	w2, err := w1.Withdraw("v1.3.0", "", signedAt.Add(-time.Hour), meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	if w2.Seq != w1.Seq+1 || len(w2.Withdrawn) != 2 {
		t.Fatalf("second list: seq %d (first %d), %d entries", w2.Seq, w1.Seq, len(w2.Withdrawn))
	}
	if _, err := w2.Withdraw("v1.2.0", "again", signedAt, meshtest.ReleaseKey.Private); err == nil {
		t.Fatal("withdrawing a version twice was accepted")
	}
	if e, ok := w2.Has("v1.2.0"); !ok || e.Reason != `crashes "under load"` {
		t.Fatalf("Has(v1.2.0) = %+v, %v", e, ok)
	}
	dropped := w2
	dropped.Withdrawn = dropped.Withdrawn[1:]
	for _, tc := range []struct {
		name string
		w    wire.Withdrawals
		want error
	}{
		{"as signed", w2, nil},
		{"an entry dropped", dropped, wire.ErrWithdrawalsBadSignature},
		{"untrusted", func() wire.Withdrawals { w := w2; _ = w.Sign(meshtest.StrangerKey.Private); return w }(), wire.ErrWithdrawalsUnknownKey},
		{"unsigned", func() wire.Withdrawals { w := w2; w.Signature = ""; return w }(), wire.ErrWithdrawalsUnsigned},
	} {
		t.Run(tc.name, func(t *testing.T) {
			read, err := wire.ParseWithdrawals(tc.w.Marshal())
			if err != nil {
				t.Fatal(err)
			}
			if err := read.Verify(wire.LegacyTrust(nil, trusted), time.Now()); !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Verify = %v, want %v", err, tc.want)
			}
		})
	}
	for _, tc := range []struct{ name, reason, want string }{
		{"a newline in the reason", "a\nb", "unprintable"},
		{"a reason too long", strings.Repeat("r", wire.MaxWithdrawalReason+1), "more than the 256"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.Withdrawals{}.Withdraw("v1.2.0", tc.reason, signedAt, meshtest.ReleaseKey.Private)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Withdraw = %v, want %q", err, tc.want)
			}
		})
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func TestSequenceNumbersStayBelowMaxSeq(t *testing.T) {
	if _, err := wire.ParseTarget([]byte(`{"version":"v1.4.0","seq":9007199254740992,"expires":"2026-12-06T12:00:00Z","key_id":"","signature":""}`)); err == nil || !strings.Contains(err.Error(), "above the largest allowed") {
		t.Fatalf("a target with seq 2^53: %v", err)
	}
	if _, err := wire.NewTarget("fleet", "v1.4.0", wire.MaxSeq, signedAt, time.Hour, meshtest.ReleaseKey.Private); err == nil || !strings.Contains(err.Error(), "no later target") {
		t.Fatalf("numbering after MaxSeq: %v", err)
	}
	if _, err := (wire.Withdrawals{Seq: wire.MaxSeq}).Withdraw("v1.2.0", "", signedAt, meshtest.ReleaseKey.Private); err == nil || !strings.Contains(err.Error(), "no later list") {
		t.Fatalf("withdrawing after MaxSeq: %v", err)
	}
}
