package rollback

import (
	"context"
	"database/sql"
	"time"
)

// Start is one recorded start of a version.
type Start struct {
	ID          int64
	Version     string
	PID         int
	StartedAt   time.Time
	ConfirmedAt time.Time
	EndedAt     time.Time
	ExitCode    int
	Signal      string
	Outcome     Outcome // "" while it runs
	Output      string
}

// Starts lists every start of version, oldest first.
func (r *Records) Starts(ctx context.Context, version string) ([]Start, error) {
	rows, err := r.db.QueryContext(ctx, `SELECT id, version, COALESCE(pid, 0), started_at, confirmed_at, ended_at,
		COALESCE(exit_code, 0), COALESCE(signal, ''), COALESCE(outcome, ''), COALESCE(output, '')
		FROM starts WHERE version = ? ORDER BY id`, version)
	if err != nil {
		return nil, r.wrap("read starts of "+version, err)
	}
	defer rows.Close()
	var out []Start
	for rows.Next() {
		var s Start
		var started int64
		var confirmed, ended sql.NullInt64
		var outcome string
		if err := rows.Scan(&s.ID, &s.Version, &s.PID, &started, &confirmed, &ended, &s.ExitCode, &s.Signal, &outcome, &s.Output); err != nil {
			return nil, r.wrap("read starts of "+version, err)
		}
		s.StartedAt, s.ConfirmedAt, s.EndedAt, s.Outcome = time.UnixMicro(started), fromUS(confirmed), fromUS(ended), Outcome(outcome)
		out = append(out, s)
	}
	return out, r.wrapIf("read starts of "+version, rows.Err())
}

// Outcomes lists how each start of version ended, oldest first ("" for one still running).
func (r *Records) Outcomes(ctx context.Context, version string) ([]string, error) {
	starts, err := r.Starts(ctx, version)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(starts))
	for i, s := range starts {
		out[i] = string(s.Outcome)
	}
	return out, nil
}
