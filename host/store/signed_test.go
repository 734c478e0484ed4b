package store

import (
	"context"
	"crypto/ed25519"
	"crypto/sha256"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire"
)

func TestStoreAcceptsSignedValuesOnlyForward(t *testing.T) {
	nowMS := uint64(time.Now().UnixMilli())
	for _, tc := range []struct {
		name    string
		seq     uint64
		sig     string
		same    bool
		wantErr error
		want    string
		kept    uint64
	}{
		{"a higher seq is accepted", 11, "b", false, nil, "", 11},
		{"the same seq and signature is the same value", 10, "a", true, nil, "", 10},
		{"a lower seq is a replay", 9, "z", false, ErrReplay, "replay: seq 9 ≤ 10 already accepted", 10},
		{"the same seq with another signature is refused", 10, "other", false, ErrSeqReused, "seq 10 was accepted", 10},
		{"a seq up to a year ahead of the clock is accepted", nowMS + SeqLead/2, "c", false, nil, "", nowMS + SeqLead/2},
		{"a seq more than a year ahead of the clock and the last accepted is refused", nowMS + SeqLead + 60_000, "c", false, ErrSeqAhead, "more than a year ahead", 10},
		{"a seq that would wrap is refused", 1<<64 - 1, "c", false, ErrSeqAhead, "more than a year ahead", 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			s, _ := openTemp(t)
			if _, err := s.AcceptSigned(ctx, TargetWhat, "node.n1", 10, "a"); err != nil {
				t.Fatal(err)
			}
			same, err := s.AcceptSigned(ctx, TargetWhat, "node.n1", tc.seq, tc.sig)
			if same != tc.same || !errors.Is(err, tc.wantErr) || (tc.want != "" && !strings.Contains(err.Error(), tc.want)) {
				t.Fatalf("same %v, err %v; want same %v, err %v naming %q", same, err, tc.same, tc.wantErr, tc.want)
			}
			a, ok, err := s.Accepted(ctx, TargetWhat, "node.n1")
			if err != nil || !ok || a.Seq != tc.kept {
				t.Fatalf("accepted %+v ok=%v err=%v, want seq %d kept", a, ok, err, tc.kept)
			}
		})
	}
}

func TestStoreKeepsSeqPerKeyAcrossARestart(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	for _, k := range []struct {
		what, key string
		seq       uint64
	}{{TargetWhat, "node.n1", 5}, {TargetWhat, "fleet", 50}, {WithdrawalsWhat, "list", 7}} {
		if _, err := s.AcceptSigned(ctx, k.what, k.key, k.seq, "sig"); err != nil {
			t.Fatal(err)
		}
	}
	s.Close()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// fleet's seq 50 does not hold node.n1 back, and a restart forgets nothing.
	if _, err := s.AcceptSigned(ctx, TargetWhat, "node.n1", 6, "sig2"); err != nil {
		t.Errorf("node.n1 seq 6 after 5: %v", err)
	}
	if _, err := s.AcceptSigned(ctx, TargetWhat, "fleet", 49, "sig2"); !errors.Is(err, ErrReplay) {
		t.Errorf("fleet seq 49 after 50 across a restart: %v, want a replay", err)
	}
	if _, ok, _ := s.Accepted(ctx, TargetWhat, "node.n2"); ok {
		t.Error("a key never accepted reports a value")
	}
}

func testKey() ed25519.PrivateKey {
	seed := sha256.Sum256([]byte("store test key"))
	return ed25519.NewKeyFromSeed(seed[:])
}

func TestStoreWithdrawalsAreKeptAndNeverUndone(t *testing.T) {
	ctx := context.Background()
	s, path := openTemp(t)
	now := time.Date(2026, 11, 29, 10, 0, 0, 0, time.UTC)
	w1, err := wire.Withdrawals{}.Withdraw("v1.2.0", "crashes on arm64", now, testKey())
	if err != nil {
		t.Fatal(err)
	}
	w2, err := w1.Withdraw("v1.3.0", "leaks", now.Add(time.Minute), testKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcceptWithdrawals(ctx, w1); err != nil {
		t.Fatal(err)
	}
	if same, err := s.AcceptWithdrawals(ctx, w1); !same || err != nil {
		t.Fatalf("the same list again: same %v err %v", same, err)
	}
	if _, err := s.AcceptWithdrawals(ctx, w2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcceptWithdrawals(ctx, w1); !errors.Is(err, ErrReplay) {
		t.Fatalf("the older list again: %v, want a replay", err)
	}
	// A later list that leaves v1.2.0 out (its signer dropped it) does not bring it back.
	w3 := wire.Withdrawals{Seq: w2.Seq + 1, Withdrawn: w2.Withdrawn[1:]}
	if err := w3.Sign(testKey()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcceptWithdrawals(ctx, w3); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s, err = Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	got, err := s.Withdrawn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Version != "v1.2.0" || got[0].Reason != "crashes on arm64" || got[1].Version != "v1.3.0" {
		t.Fatalf("withdrawn after a restart: %+v", got)
	}
}

// A host steps down to older versions (a rollback, a withdrawal): the tables added for signed
// values must not raise the schema version an older host checks, or it could not open the store.
func TestStoreAdditionsKeepTheSchemaAnOlderHostOpens(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), FileName)
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcceptSigned(ctx, TargetWhat, "fleet", 1, "x"); err != nil {
		t.Fatal(err)
	}
	var v int
	if err := s.db.QueryRowContext(ctx, `PRAGMA user_version`).Scan(&v); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if v != 1 {
		t.Errorf("schema version %d after adding the signed-value tables; an older host refuses anything above 1", v)
	}
	if err := Check(ctx, path); err != nil {
		t.Errorf("check: %v", err)
	}
}

// A value signed by several keys carries no single signature: the store tells it from another
// with the same seq by its signed text, and the same value signed again by more keys is the
// same value; a value with one signature is known by it, as hosts before roots kept it.
func TestContentIDTellsValuesSignedBySeveralKeysApart(t *testing.T) {
	one := wire.SignatureList{KeyID: "k1", Signature: "sig"}
	two := wire.SignatureList{Signatures: []wire.Signature{{KeyID: "k1", Signature: "a"}, {KeyID: "k2", Signature: "b"}}}
	three := wire.SignatureList{Signatures: append(two.Signatures, wire.Signature{KeyID: "k3", Signature: "c"})}
	if got := ContentID(one, []byte("text")); got != "sig" {
		t.Errorf("one signature: %q, want the signature", got)
	}
	if ContentID(two, []byte("text")) != ContentID(three, []byte("text")) {
		t.Error("the same text signed by more keys is another value")
	}
	if ContentID(two, []byte("text")) == ContentID(two, []byte("other text")) {
		t.Error("two texts under several signatures are the same value")
	}
}
