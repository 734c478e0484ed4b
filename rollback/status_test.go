package rollback

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestStatusOfFreshRootIsEmptyButNotNil(t *testing.T) {
	root := newRoot(t)
	r, _ := openRecords(t, root)
	st, err := r.Status(context.Background(), root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running != nil || st.KnownGood != "" || st.Predecessor != "" || st.Failed {
		t.Errorf("Status = %+v", st)
	}
	b, _ := json.Marshal(st)
	for _, want := range []string{`"running":null`, `"versions":[]`, `"ignored":[]`, `"rollbacks":[]`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("JSON %s lacks %s", b, want)
		}
	}
}

func TestStatusListsVersionsOnDiskThenRecordsOnlyAndIgnoredEntries(t *testing.T) {
	root := newRoot(t)
	r, c := openRecords(t, root)
	ctx := context.Background()
	digests := map[string]string{}
	for _, v := range []string{"v0.9.0", "v1.0.0", "v1.1.0", "v1.2.0", "v1.3.0"} {
		digests[v] = stage(t, root, v, "")
		if _, err := r.candidate(ctx, root, v); err != nil {
			t.Fatal(err)
		}
	}
	confirm(t, r, root, "v0.9.0")
	startEnded(t, r, c, "v0.9.0", OutcomeStopped)
	confirm(t, r, root, "v1.0.0")
	startEnded(t, r, c, "v1.0.0", OutcomeStoodAside)
	// v1.2.0 failed and was marked bad; v1.3.0 changed on disk; v0.9.0 was retired.
	for i := 0; i < 3; i++ {
		startEnded(t, r, c, "v1.2.0", OutcomeFailed)
	}
	if err := r.MarkBad(ctx, "v1.2.0", "failed 3 times"); err != nil {
		t.Fatal(err)
	}
	if err := r.RecordRollback(ctx, Rollback{From: "v1.2.0", To: "v1.0.0", Reason: "failed 3 times", Output: "last words of v1.2.0"}); err != nil {
		t.Fatal(err)
	}
	stage(t, root, "v1.3.0", "changed since it was seen, longer")
	if err := os.RemoveAll(VersionDir(root, "v0.9.0")); err != nil {
		t.Fatal(err)
	}
	// Not versions.
	for _, name := range []string{"latest", "1.2.0", ".staging-abc"} {
		if err := os.MkdirAll(filepath.Join(VersionsDir(root), name), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// v1.1.0 is running now.
	c.advance(time.Minute)
	id, err := r.BeginStart(ctx, "v1.1.0")
	if err != nil {
		t.Fatal(err)
	}
	since := c.now().Add(5 * time.Millisecond)
	if err := r.SetPID(ctx, id, 777, since); err != nil {
		t.Fatal(err)
	}
	startEnded(t, r, c, "v1.1.0", OutcomeFailed) // an earlier, ended start does not hide the open one

	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running == nil || st.Running.Version != "v1.1.0" || st.Running.PID != 777 || !st.Running.Since.Equal(since) || st.Running.StartID != id {
		t.Errorf("Running = %+v, want v1.1.0 pid 777 since %v", st.Running, since)
	}
	if st.KnownGood != "v1.0.0" || st.Predecessor != "v1.0.0" {
		t.Errorf("KnownGood %q, Predecessor %q; want v1.0.0, v1.0.0", st.KnownGood, st.Predecessor)
	}
	if want := []string{".staging-abc", "1.2.0", "latest"}; !reflect.DeepEqual(st.Ignored, want) {
		t.Errorf("Ignored = %v, want %v", st.Ignored, want)
	}
	var names []string
	byName := map[string]VersionStatus{}
	for _, v := range st.Versions {
		names = append(names, v.Version)
		byName[v.Version] = v
	}
	if want := []string{"v1.3.0", "v1.2.0", "v1.1.0", "v1.0.0", "v0.9.0"}; !reflect.DeepEqual(names, want) {
		t.Fatalf("Versions = %v, want %v (newest first, on disk or records only)", names, want)
	}
	if v := byName["v1.3.0"]; !v.OnDisk || !strings.Contains(v.Mismatch, "changed") || v.Digest != digests["v1.3.0"] {
		t.Errorf("v1.3.0 = %+v, want on disk with a mismatch and its first digest", v)
	}
	if v := byName["v1.2.0"]; !v.Bad || v.BadReason != "failed 3 times" || v.Failures != 3 || v.LastOutput != "last words of v1.2.0" || v.Running {
		t.Errorf("v1.2.0 = %+v, want bad with 3 failures and its last output", v)
	}
	if v := byName["v1.1.0"]; !v.Running || v.Confirmed || v.Failures != 1 || !v.OnDisk || v.Digest != digests["v1.1.0"] {
		t.Errorf("v1.1.0 = %+v, want running, unconfirmed, 1 failure", v)
	}
	if v := byName["v1.0.0"]; !v.Confirmed || v.Running || v.Failures != 0 || v.Bad || v.LastOutput != "" {
		t.Errorf("v1.0.0 = %+v, want confirmed, 0 failures (standing aside is not failing)", v)
	}
	if v := byName["v0.9.0"]; v.OnDisk || !v.Confirmed || v.Digest != digests["v0.9.0"] {
		t.Errorf("v0.9.0 = %+v, want records only, confirmed", v)
	}
	if len(st.Rollbacks) != 1 || st.Rollbacks[0].From != "v1.2.0" {
		t.Errorf("Rollbacks = %+v", st.Rollbacks)
	}
}

func TestStatusRecordsDigestOfVersionSeenForTheFirstTime(t *testing.T) {
	root := newRoot(t)
	want := stage(t, root, "v1.0.0", "")
	r, _ := openRecords(t, root)
	st, err := r.Status(context.Background(), root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Versions) != 1 || st.Versions[0].Digest != want {
		t.Errorf("Versions = %+v, want v1.0.0 with digest %s", st.Versions, want)
	}
}

func TestStatusPredecessorIsRelativeToKnownGoodWhenNothingRuns(t *testing.T) {
	root := newRoot(t)
	r, c := openRecords(t, root)
	ctx := context.Background()
	for _, v := range []string{"v1.0.0", "v2.0.0"} {
		stage(t, root, v, "")
		if _, err := r.candidate(ctx, root, v); err != nil {
			t.Fatal(err)
		}
		confirm(t, r, root, v)
	}
	if _, err := r.EndInterrupted(ctx); err != nil {
		t.Fatal(err)
	}
	c.advance(time.Second)
	st, err := r.Status(ctx, root, DefaultPolicy)
	if err != nil {
		t.Fatal(err)
	}
	if st.Running != nil || st.KnownGood != "v2.0.0" || st.Predecessor != "v1.0.0" {
		t.Errorf("Running %+v, KnownGood %q, Predecessor %q; want none, v2.0.0, v1.0.0", st.Running, st.KnownGood, st.Predecessor)
	}
}
