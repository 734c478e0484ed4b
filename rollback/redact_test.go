package rollback

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// Records written before output was redacted (by an older launcher) may hold a bus password;
// what is read out of them, for status and for every heartbeat, does not.
func TestRecordsWrittenBeforeRedactionReadBackRedacted(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	ctx := context.Background()
	const leak = "bus=nats://mesh:S3cretPassw0rd@10.0.0.1:4222"
	stage(t, root, "v2.0.0", "")
	see(t, r, root)
	id, err := r.BeginStart(ctx, "v2.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if err := r.EndStart(ctx, id, End{Outcome: OutcomeFailed, ExitCode: 1, Output: "link: connected " + leak}); err != nil {
		t.Fatal(err)
	}
	for _, write := range []func() error{
		func() error { return r.MarkBad(ctx, "v2.0.0", "exited with status 1: "+leak) },
		func() error {
			return r.RecordRollback(ctx, Rollback{From: "v2.0.0", To: "v1.0.0", Reason: "exited: " + leak, Output: "link: connected " + leak})
		},
		func() error { return r.SetFailed(ctx, "the machine is the problem: "+leak) },
	} {
		if err := write(); err != nil {
			t.Fatal(err)
		}
	}
	rbs, err := r.Rollbacks(ctx, 10)
	if err != nil {
		t.Fatal(err)
	}
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(struct {
		R []Rollback
		S Status
	}{rbs, st})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(b), "S3cretPassw0rd") {
		t.Errorf("read back with the password: %s", b)
	}
	if !strings.Contains(string(b), "mesh:xxxxx@10.0.0.1") || !strings.Contains(st.Versions[0].LastOutput, "link: connected") {
		t.Errorf("read back without the redacted text: %s", b)
	}
}
