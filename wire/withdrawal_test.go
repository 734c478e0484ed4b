package wire_test

import (
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

// A withdrawal list may expire: expires= is signed after the entries only when set, so a list
// without it signs as before (testdata/signed/withdrawals.json); Renew re-signs the entries.
func TestWithdrawalsExpiry(t *testing.T) {
	never, err := wire.Withdrawals{}.Withdraw("v1.2.0", "crashes", envNow, tgtA)
	must(t, err)
	if never.Expires != "" || strings.Contains(string(never.SigningText()), "expires=") || strings.Contains(string(never.Marshal()), "expires") {
		t.Fatalf("a list without a ttl carries an expiry: %s", never.Marshal())
	}
	w, err := never.WithdrawFor("v1.3.0", "leaks", envNow.Add(time.Minute), 7*24*time.Hour, tgtA)
	must(t, err)
	wantText := "mesh-host withdrawals 1\nseq=" + strconv.FormatUint(w.Seq, 10) + "\n" +
		"withdrawn=v1.2.0 2026-12-02T12:00:00Z \"crashes\"\n" +
		"withdrawn=v1.3.0 2026-12-02T12:01:00Z \"leaks\"\n" +
		"expires=2026-12-09T12:01:00Z\n"
	if got := string(w.SigningText()); got != wantText {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, wantText)
	}
	back, err := wire.ParseWithdrawals(w.Marshal())
	must(t, err)
	must(t, back.Verify(wire.LegacyTrust(nil, pubs(tgtA)), envNow))
	if back.ExpiredAt(envNow) || !back.ExpiredAt(envNow.Add(8*24*time.Hour)) || never.ExpiredAt(envNow.AddDate(50, 0, 0)) {
		t.Fatal("expiry judged wrong")
	}
	later := envNow.Add(5 * 24 * time.Hour)
	renewed, err := back.Renew(later, 7*24*time.Hour, tgtA)
	must(t, err)
	if renewed.Seq <= back.Seq || len(renewed.Withdrawn) != 2 || renewed.Expires != later.Add(7*24*time.Hour).Format(time.RFC3339) {
		t.Fatalf("renewed: %s", renewed.Marshal())
	}
	if _, err := back.Renew(later, 0, tgtA); err == nil {
		t.Fatal("renewed without an expiry")
	}
	if _, err := back.WithdrawFor("v1.2.0", "again", later, time.Hour, tgtA); err == nil || !strings.Contains(err.Error(), "already withdrawn") {
		t.Fatalf("withdrawn twice: %v", err)
	}
	bad := w
	bad.Expires = "soon"
	if _, err := wire.ParseWithdrawals(bad.Marshal()); err == nil || !strings.Contains(err.Error(), `expires "soon"`) {
		t.Fatalf("a malformed expiry: %v", err)
	}
}

// Why the release side writes expires only once its fleet reads it: a host from before decision
// 0045 decodes the list strictly into the fields it knows and refuses one carrying expires (and
// keeps the withdrawals it holds), while it reads a list without it.
func TestAHostBeforeRootsRefusesAListCarryingExpires(t *testing.T) {
	type before struct { // wire.Withdrawals before decision 0045
		Seq       uint64           `json:"seq"`
		Withdrawn []wire.Withdrawn `json:"withdrawn"`
		KeyID     string           `json:"key_id"`
		Signature string           `json:"signature"`
	}
	never, err := wire.Withdrawals{}.Withdraw("v1.2.0", "crashes", envNow, tgtA)
	must(t, err)
	var old before
	must(t, wire.DecodeStrict(never.Marshal(), &old))
	expiring, err := wire.Withdrawals{}.WithdrawFor("v1.2.0", "crashes", envNow, time.Hour, tgtA)
	must(t, err)
	if err := wire.DecodeStrict(expiring.Marshal(), &old); err == nil || !strings.Contains(err.Error(), "expires") {
		t.Fatalf("an older host read a list carrying expires: %v", err)
	}
}

// The withdrawal list's errors still match its own sentinels.
func TestWithdrawalsVerifySentinels(t *testing.T) {
	w, err := wire.Withdrawals{}.Withdraw("v1.2.0", "crashes", envNow, tgtA)
	must(t, err)
	unsigned := w
	unsigned.Signature = ""
	for _, tc := range []struct {
		name  string
		w     wire.Withdrawals
		trust wire.Trust
		want  error
	}{
		{"unsigned", unsigned, wire.LegacyTrust(nil, pubs(tgtA)), wire.ErrWithdrawalsUnsigned},
		{"a key not trusted", w, wire.LegacyTrust(nil, pubs(tgtB)), wire.ErrWithdrawalsUnknownKey},
		{"by a releases key of a root", w, chainTo(t, makeRoot(2, roleSpec{keys(rootA, rootB, rootC), 2, ""}, roleSpec{keys(tgtA), 1, ""}, roleSpec{keys(tgtB), 1, ""})), wire.ErrWithdrawalsUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.w.Verify(tc.trust, envNow); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}
