package store

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/novox/mesh-host/wire"
)

// Errors AcceptSigned and AcceptWithdrawals return (wrapped, with the numbers); test them with
// errors.Is.
var (
	// ErrReplay: the value's sequence number is below the one already accepted under its key:
	// an older value put back on the bus.
	ErrReplay = errors.New("replay")
	// ErrSeqReused: the value's sequence number is the one already accepted, with another
	// signature: other content under a number that was used.
	ErrSeqReused = errors.New("sequence number already accepted with another signature")
	// ErrSeqAhead: the value's sequence number is more than SeqLead ahead of both this node's
	// clock and the number last accepted under its key. Signers number values after the clock in
	// milliseconds; one far ahead would make every later value look like a replay, so a stolen
	// key could otherwise silence its key's channel for good.
	ErrSeqAhead = errors.New("sequence number too far ahead")
)

// SeqLead is how far ahead (in milliseconds of a signer's clock) a sequence number may run past
// both this node's clock and the last number accepted: a year.
const SeqLead = uint64(366 * 24 * time.Hour / time.Millisecond)

// Accepted is the newest signed value accepted under a key.
type Accepted struct {
	Seq       uint64
	Signature string
	At        time.Time
}

// Accepted returns the newest value accepted under (what, key); ok is false when none was.
func (s *Store) Accepted(ctx context.Context, what, key string) (a Accepted, ok bool, err error) {
	return accepted(ctx, s.db, what, key, s.wrap)
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func accepted(ctx context.Context, q querier, what, key string, wrap func(string, error) error) (Accepted, bool, error) {
	var seq, at int64
	var a Accepted
	err := q.QueryRowContext(ctx, `SELECT seq, signature, at FROM accepted WHERE what = ? AND key = ?`, what, key).Scan(&seq, &a.Signature, &at)
	if errors.Is(err, sql.ErrNoRows) {
		return Accepted{}, false, nil
	}
	if err != nil {
		return Accepted{}, false, wrap("read the accepted "+what+" "+key, err)
	}
	a.Seq, a.At = uint64(seq), time.UnixMilli(at)
	return a, true, nil
}

// ContentID is what the store keeps of a signed value to tell the same value arriving again
// from another with the same seq: its signature when it carries one (what every host before
// roots kept, so a value accepted by one is the same value to this one), else, for a value
// signed by several keys, "sha256:" and the hex of its signing text's SHA-256.
func ContentID(sl wire.SignatureList, text []byte) string {
	if len(sl.Signatures) == 0 {
		return sl.Signature
	}
	sum := sha256.Sum256(text)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// AcceptSigned records that the signed value under (what, key) with seq and signature is
// accepted, unless it goes backward: a lower seq is ErrReplay, the same seq with another
// signature ErrSeqReused, and neither changes anything. same is true when it is the value
// already accepted (it arrives again after every reconnect and restart), which is no refusal.
func (s *Store) AcceptSigned(ctx context.Context, what, key string, seq uint64, signature string) (same bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, s.wrap("accept "+what, err)
	}
	defer tx.Rollback()
	same, err = s.acceptTx(ctx, tx, what, key, seq, signature)
	if err != nil || same {
		return same, err
	}
	return false, s.wrapCommit("accept "+what, tx.Commit())
}

func (s *Store) acceptTx(ctx context.Context, tx *sql.Tx, what, key string, seq uint64, signature string) (same bool, err error) {
	prev, ok, err := accepted(ctx, tx, what, key, s.wrap)
	if err != nil {
		return false, err
	}
	base := max(prev.Seq, uint64(max(s.now().UnixMilli(), 0)))
	if seq > base+SeqLead {
		return false, fmt.Errorf("%w: seq %d is more than a year ahead of both this node's clock (%d) and the last accepted (%d); refused so that one value cannot make every later one look like a replay — check the signer's clock",
			ErrSeqAhead, seq, s.now().UnixMilli(), prev.Seq)
	}
	if ok {
		switch {
		case seq < prev.Seq:
			return false, fmt.Errorf("%w: seq %d ≤ %d already accepted (on %s)", ErrReplay, seq, prev.Seq, prev.At.UTC().Format(time.RFC3339))
		case seq == prev.Seq && signature != prev.Signature:
			return false, fmt.Errorf("%w: seq %d was accepted on %s with other content", ErrSeqReused, seq, prev.At.UTC().Format(time.RFC3339))
		case seq == prev.Seq:
			return true, nil
		}
	}
	_, err = tx.ExecContext(ctx, `INSERT INTO accepted (what, key, seq, signature, at) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (what, key) DO UPDATE SET seq = excluded.seq, signature = excluded.signature, at = excluded.at`,
		what, key, int64(seq), signature, s.now().UnixMilli())
	if err != nil {
		return false, s.wrap("accept "+what, err)
	}
	return false, nil
}

// The kinds of signed value AcceptSigned keeps a sequence number for: targets (per target key),
// the withdrawal list (key wire.WithdrawalsKey) and the rollout plan.
const (
	TargetWhat      = "target"
	WithdrawalsWhat = "withdrawals"
	// PlanWhat: the rollout plan (key wire.PlanKey, decision 0047).
	PlanWhat = "plan"
)

// AcceptWithdrawals accepts a verified withdrawal list as AcceptSigned does (ErrReplay,
// ErrSeqReused, same) and, in the same transaction, adds its entries to the versions withdrawn.
// An entry already withdrawn keeps its first reason; one a later list leaves out stays
// withdrawn.
func (s *Store) AcceptWithdrawals(ctx context.Context, w wire.Withdrawals) (same bool, err error) {
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return false, s.wrap("accept the withdrawal list", err)
	}
	defer tx.Rollback()
	same, err = s.acceptTx(ctx, tx, WithdrawalsWhat, wire.WithdrawalsKey, w.Seq, ContentID(w.SignatureList, w.SigningText()))
	if err != nil || same {
		return same, err
	}
	for _, e := range w.Withdrawn {
		if _, err := tx.ExecContext(ctx, `INSERT INTO withdrawn (version, reason, at, seq) VALUES (?, ?, ?, ?) ON CONFLICT (version) DO NOTHING`,
			e.Version, e.Reason, e.At, int64(w.Seq)); err != nil {
			return false, s.wrap("record withdrawn "+e.Version, err)
		}
	}
	return false, s.wrapCommit("accept the withdrawal list", tx.Commit())
}

// Withdrawn returns every version withdrawn by a list this host accepted, oldest withdrawal
// first.
func (s *Store) Withdrawn(ctx context.Context) ([]wire.Withdrawn, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT version, reason, at FROM withdrawn ORDER BY seq, rowid`)
	if err != nil {
		return nil, s.wrap("read the withdrawn versions", err)
	}
	defer rows.Close()
	var out []wire.Withdrawn
	for rows.Next() {
		var e wire.Withdrawn
		if err := rows.Scan(&e.Version, &e.Reason, &e.At); err != nil {
			return nil, s.wrap("read the withdrawn versions", err)
		}
		out = append(out, e)
	}
	return out, s.wrapCommit("read the withdrawn versions", rows.Err())
}
