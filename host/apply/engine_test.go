package apply_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/wire"
)

// The engine's tests run over real files in t.TempDir() and a real store.db. The appliers here
// are small stand-ins for host/apply/files (directory: path and mode; file: content and mode),
// written in the test so the engine's semantics are proved on their own; the real appliers are
// tested in their package and, with this engine, by the host's and the CLI's tests.

// dirApplier is a directory with a mode.
type dirApplier struct{ log *[]string }

func dirPath(r wire.Resource) string {
	if p := r.Parsed.(*wire.DirectorySpec).Path; p != "" {
		return p
	}
	return r.ID
}

func modeOf(s string, def fs.FileMode) fs.FileMode {
	if s == "" {
		return def
	}
	m, _ := strconv.ParseUint(s, 8, 32)
	return fs.FileMode(m)
}

func (a dirApplier) Inspect(_ context.Context, r wire.Resource) ([]string, error) {
	want := modeOf(r.Parsed.(*wire.DirectorySpec).Mode, 0o755)
	fi, err := os.Lstat(dirPath(r))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return []string{"missing"}, nil
	case err != nil:
		return nil, err
	case !fi.IsDir():
		return []string{"is not a directory"}, nil
	case fi.Mode().Perm() != want:
		return []string{fmt.Sprintf("mode is %04o, declared %04o", fi.Mode().Perm(), want)}, nil
	}
	return nil, nil
}

func (a dirApplier) Apply(_ context.Context, r wire.Resource) (bool, error) {
	p, want := dirPath(r), modeOf(r.Parsed.(*wire.DirectorySpec).Mode, 0o755)
	created := false
	if err := os.Mkdir(p, want); err == nil {
		created = true
	} else if !errors.Is(err, fs.ErrExist) {
		return false, err
	}
	return created, os.Chmod(p, want)
}

func (a dirApplier) Remove(_ context.Context, o apply.Owned) (string, error) {
	if a.log != nil {
		*a.log = append(*a.log, "directory "+o.ID)
	}
	if !o.Created {
		return "forgotten: the host did not create it", nil
	}
	return "removed", os.Remove(dirPath(o.Resource()))
}

// fileApplier is a file with content and a mode.
type fileApplier struct {
	log  *[]string
	lies bool // Apply says it worked and does nothing (the read-back must catch it)
}

func filePath(r wire.Resource) string {
	if p := r.Parsed.(*wire.FileSpec).Path; p != "" {
		return p
	}
	return r.ID
}

func (a fileApplier) Inspect(_ context.Context, r wire.Resource) ([]string, error) {
	s := r.Parsed.(*wire.FileSpec)
	b, err := os.ReadFile(filePath(r))
	if errors.Is(err, fs.ErrNotExist) {
		return []string{"missing"}, nil
	}
	if err != nil {
		return nil, err
	}
	var diffs []string
	if s.Content != nil && string(b) != *s.Content {
		diffs = append(diffs, fmt.Sprintf("content is sha256:%x, declared sha256:%x", sha256.Sum256(b), sha256.Sum256([]byte(*s.Content))))
	}
	fi, err := os.Stat(filePath(r))
	if err != nil {
		return nil, err
	}
	if want := modeOf(s.Mode, 0o644); fi.Mode().Perm() != want {
		diffs = append(diffs, fmt.Sprintf("mode is %04o, declared %04o", fi.Mode().Perm(), want))
	}
	return diffs, nil
}

func (a fileApplier) Apply(_ context.Context, r wire.Resource) (bool, error) {
	if a.lies {
		return false, nil
	}
	s, p := r.Parsed.(*wire.FileSpec), filePath(r)
	_, err := os.Lstat(p)
	created := errors.Is(err, fs.ErrNotExist)
	content := ""
	if s.Content != nil {
		content = *s.Content
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		return false, err
	}
	return created, os.Chmod(p, modeOf(s.Mode, 0o644))
}

func (a fileApplier) Remove(_ context.Context, o apply.Owned) (string, error) {
	if a.log != nil {
		*a.log = append(*a.log, "file "+o.ID)
	}
	if !o.Created {
		return "forgotten: the host did not create it", nil
	}
	return "removed", os.Remove(filePath(o.Resource()))
}

type rig struct {
	t      *testing.T
	dir    string // where the resources live
	store  *store.Store
	e      *apply.Engine
	remove []string // Remove calls, in order
}

func newRig(t *testing.T) *rig {
	t.Helper()
	s, err := store.Open(context.Background(), filepath.Join(t.TempDir(), store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	r := &rig{t: t, dir: t.TempDir(), store: s}
	r.e = &apply.Engine{
		Appliers: apply.Appliers{wire.KindDirectory: dirApplier{&r.remove}, wire.KindFile: fileApplier{log: &r.remove}},
		Ledger:   s, Guard: apply.Guard{Root: t.TempDir()},
	}
	return r
}

// p is a path under the rig's directory.
func (r *rig) p(name string) string { return filepath.Join(r.dir, name) }

func dir(path, mode string) wire.Resource {
	spec := map[string]string{}
	if mode != "" {
		spec["mode"] = mode
	}
	return resource(wire.KindDirectory, path, spec)
}

func file(path, content, mode string) wire.Resource {
	spec := map[string]string{"content": content}
	if mode != "" {
		spec["mode"] = mode
	}
	return resource(wire.KindFile, path, spec)
}

func resource(kind, id string, spec any) wire.Resource {
	b, _ := json.Marshal(spec)
	return wire.Resource{Type: kind, ID: id, Spec: b}
}

func declaration(rs ...wire.Resource) wire.Declaration {
	return wire.Declaration{Version: 1, Node: "n1", Resources: rs}
}

func (r *rig) apply(d wire.Declaration) (apply.Report, error) {
	r.t.Helper()
	return r.e.Apply(context.Background(), d, nil)
}

func (r *rig) owned() []string {
	r.t.Helper()
	owned, err := r.store.Owned(context.Background())
	if err != nil {
		r.t.Fatal(err)
	}
	var out []string
	for _, o := range owned {
		out = append(out, fmt.Sprintf("%s %s created=%v", o.Type, filepath.Base(o.ID), o.Created))
	}
	return out
}

func actions(rep apply.Report) string {
	var out []string
	for _, s := range rep.Steps {
		out = append(out, filepath.Base(s.ID)+":"+s.Action)
	}
	return strings.Join(out, " ")
}

// The same declaration applied twice changes nothing the second time, and the report says so.
func TestApplyingTheSameDeclarationTwiceChangesNothingTheSecondTime(t *testing.T) {
	r := newRig(t)
	d := declaration(dir(r.p("etc"), "0750"), file(r.p("etc/a.conf"), "a=1\n", "0600"))
	first, err := r.apply(d)
	if err != nil || !first.Complete || first.Changed() != 2 || actions(first) != "etc:created a.conf:created" {
		t.Fatalf("first apply: %s, changed %d, %v", actions(first), first.Changed(), err)
	}
	second, err := r.apply(d)
	if err != nil || !second.Complete || second.Changed() != 0 || actions(second) != "etc:unchanged a.conf:unchanged" || len(second.Drifted) != 0 {
		t.Fatalf("second apply: %s, changed %d, drifted %v, %v; want nothing changed", actions(second), second.Changed(), second.Drifted, err)
	}
	if got := r.owned(); strings.Join(got, ",") != "directory etc created=true,file a.conf created=true" {
		t.Errorf("owned %v", got)
	}
}

// A failed step fails the apply there: it names the resource and why, later resources are
// not applied, earlier ones stay recorded, and nothing claims success.
func TestAFailedStepStopsTheApplyThereAndKeepsEarlierStepsRecorded(t *testing.T) {
	r := newRig(t)
	d := declaration(
		dir(r.p("a"), ""),
		file(r.p("a/one"), "1", ""),
		file(r.p("no-such-dir/two"), "2", ""), // its directory is not declared: the write fails
		dir(r.p("b"), ""),
	)
	rep, err := r.apply(d)
	if err == nil || rep.Complete {
		t.Fatalf("apply succeeded (complete=%v); want the third step to fail it", rep.Complete)
	}
	want := fmt.Sprintf(`resources[2] file %q: apply: `, r.p("no-such-dir/two"))
	if !strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Errorf("error %q; want it to start %q and say why", err, want)
	}
	if got := actions(rep); got != "a:created one:created two:failed" {
		t.Errorf("steps %s", got)
	}
	if _, err := os.Stat(r.p("b")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the step after the failure was applied: %v", err)
	}
	if got := strings.Join(r.owned(), ","); got != "directory a created=true,file one created=true" {
		t.Errorf("owned %s; want the two steps before the failure", got)
	}
}

// What an applier says it did is not trusted: the read-back must find the resource in state,
// or the step fails and nothing is recorded.
func TestAStepWhoseReadBackStillDiffersFailsAndIsNotRecorded(t *testing.T) {
	r := newRig(t)
	r.e.Appliers[wire.KindFile] = fileApplier{lies: true}
	_, err := r.apply(declaration(file(r.p("x"), "x", "")))
	if err == nil || !strings.Contains(err.Error(), "read back: still differs: missing") {
		t.Fatalf("error %v; want the read-back to catch it", err)
	}
	if got := r.owned(); len(got) != 0 {
		t.Errorf("recorded %v though the read-back failed", got)
	}
}

// No longer declared: removed in reverse order of first application, and only what the host
// created — a file that was there before it was declared is left (forgotten).
func TestUndeclaredResourcesAreRemovedInReverseOrderAndOnlyWhatTheHostCreated(t *testing.T) {
	r := newRig(t)
	if err := os.WriteFile(r.p("was-here"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	keep := dir(r.p("keep"), "")
	d := declaration(keep, dir(r.p("d"), ""), file(r.p("d/made"), "m", ""), file(r.p("was-here"), "mine", ""), dir(r.p("d/sub"), ""))
	if _, err := r.apply(d); err != nil {
		t.Fatal(err)
	}
	rep, err := r.apply(declaration(keep))
	if err != nil || !rep.Complete {
		t.Fatalf("apply: %v", err)
	}
	if got := strings.Join(r.remove, ","); got != "directory "+r.p("d/sub")+",file "+r.p("was-here")+",file "+r.p("d/made")+",directory "+r.p("d") {
		t.Errorf("removal order %s; want the reverse of first application", got)
	}
	if got := actions(rep); got != "keep:unchanged sub:removed was-here:forgotten made:removed d:removed" {
		t.Errorf("steps %s", got)
	}
	if b, err := os.ReadFile(r.p("was-here")); err != nil || string(b) != "mine" {
		t.Errorf("the file that was there before was touched: %q %v", b, err)
	}
	if _, err := os.Stat(r.p("d")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("the directory the host created is still there: %v", err)
	}
	if got := strings.Join(r.owned(), ","); got != "directory keep created=true" {
		t.Errorf("owned after removal: %s", got)
	}
}

// Nothing is removed unless every declared resource applied: a half-applied declaration must
// not take away what a later step may still need.
func TestNothingIsRemovedWhenAStepFailed(t *testing.T) {
	r := newRig(t)
	if _, err := r.apply(declaration(dir(r.p("old"), ""))); err != nil {
		t.Fatal(err)
	}
	if _, err := r.apply(declaration(file(r.p("missing-dir/x"), "x", ""))); err == nil {
		t.Fatal("apply succeeded")
	}
	if _, err := os.Stat(r.p("old")); err != nil || len(r.remove) != 0 {
		t.Errorf("removed after a failed step: %v, removals %v", err, r.remove)
	}
}

// An owned resource whose kind this host has no applier for is kept and said so, never
// dropped silently.
func TestAnOwnedResourceWithNoApplierIsKeptAndSaidSo(t *testing.T) {
	r := newRig(t)
	ctx := context.Background()
	if err := r.store.Record(ctx, resource(wire.KindContainer, "web", map[string]string{"image": "x@sha256:" + strings.Repeat("a", 64)}), true, time.Now()); err != nil {
		t.Fatal(err)
	}
	rep, err := r.apply(declaration())
	if err != nil || len(rep.Steps) != 1 || rep.Steps[0].Action != apply.ActionKept || !strings.Contains(rep.Steps[0].Note, `no applier for "container"`) {
		t.Fatalf("report %+v, %v", rep, err)
	}
	if got := r.owned(); len(got) != 1 {
		t.Errorf("owned %v; want the container still owned", got)
	}
}

// Drift: an owned resource changed on the machine (content, mode, a directory removed) is put
// back by the next apply of the same declaration and reported as drifted and restored.
func TestDriftIsPutBackAndReported(t *testing.T) {
	r := newRig(t)
	d := declaration(dir(r.p("d"), "0750"), file(r.p("d/f"), "right", "0640"), dir(r.p("gone"), ""))
	if _, err := r.apply(d); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(r.p("d/f"), []byte("wrong"), 0o640)
	os.Chmod(r.p("d"), 0o777)
	os.Remove(r.p("gone"))
	rep, err := r.apply(d)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, dr := range rep.Drifted {
		got = append(got, fmt.Sprintf("%s %s %v: %s", dr.Type, filepath.Base(dr.ID), dr.Restored, dr.What))
	}
	sort.Strings(got)
	want := []string{
		"directory d true: mode is 0777, declared 0750",
		"directory gone true: missing",
		fmt.Sprintf("file f true: content is sha256:%x, declared sha256:%x", sha256.Sum256([]byte("wrong")), sha256.Sum256([]byte("right"))),
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("drifted:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if b, _ := os.ReadFile(r.p("d/f")); string(b) != "right" {
		t.Errorf("content not put back: %q", b)
	}
	if again, _ := r.apply(d); again.Changed() != 0 || len(again.Drifted) != 0 {
		t.Errorf("after putting it back, another apply: %s", actions(again))
	}
}

// A changed spec is a change, not drift: only a difference from the very spec applied is.
func TestAChangedDeclarationIsNotReportedAsDrift(t *testing.T) {
	r := newRig(t)
	if _, err := r.apply(declaration(dir(r.p("d"), "0755"))); err != nil {
		t.Fatal(err)
	}
	rep, err := r.apply(declaration(dir(r.p("d"), "0700")))
	if err != nil || rep.Changed() != 1 || len(rep.Drifted) != 0 {
		t.Errorf("report %s drifted %v, %v; want one change and no drift", actions(rep), rep.Drifted, err)
	}
}

// Plan inspects and says what would change and what would be removed, changing nothing.
func TestPlanSaysWhatWouldChangeAndTouchesNothing(t *testing.T) {
	r := newRig(t)
	if _, err := r.apply(declaration(dir(r.p("old"), ""), file(r.p("f"), "v1", ""))); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, r.dir)
	ownedBefore := r.owned()
	rep, err := r.e.Plan(context.Background(), declaration(file(r.p("f"), "v2", ""), dir(r.p("new"), "")))
	if err != nil {
		t.Fatal(err)
	}
	if got := actions(rep); got != "f:changed new:changed old:removed" {
		t.Errorf("plan %s", got)
	}
	if after := snapshot(t, r.dir); after != before {
		t.Errorf("plan changed the files:\nbefore %s\nafter  %s", before, after)
	}
	if got := r.owned(); strings.Join(got, ",") != strings.Join(ownedBefore, ",") {
		t.Errorf("plan changed the ledger: %v", got)
	}
}

// Observe reads the machine now: in state, differs (and how), missing.
func TestObserveReadsTheMachineNotTheLedger(t *testing.T) {
	r := newRig(t)
	if _, err := r.apply(declaration(dir(r.p("a"), ""), file(r.p("b"), "b", ""), dir(r.p("c"), ""))); err != nil {
		t.Fatal(err)
	}
	os.Chmod(r.p("b"), 0o600)
	os.Remove(r.p("c"))
	obs, err := r.e.Observe(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, o := range obs {
		got = append(got, filepath.Base(o.ID)+": "+o.State+" "+strings.Join(o.Diffs, "; "))
	}
	want := "a: in state ,b: differs mode is 0600, declared 0644,c: missing missing"
	if strings.Join(got, ",") != want {
		t.Errorf("observed %q, want %q", strings.Join(got, ","), want)
	}
}

// A stop between steps ends the apply there with ErrStopped.
func TestAStopEndsTheApplyBetweenSteps(t *testing.T) {
	r := newRig(t)
	stop := make(chan struct{})
	close(stop)
	_, err := r.e.Apply(context.Background(), declaration(dir(r.p("a"), "")), stop)
	if !errors.Is(err, apply.ErrStopped) {
		t.Fatalf("err %v, want ErrStopped", err)
	}
	if _, err := os.Stat(r.p("a")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("applied after the stop")
	}
}

// The Guard refuses a path inside the host's root before any applier reads it, even one
// reached through a symlink.
func TestAPathIntoTheHostRootIsRefusedBeforeAnythingIsApplied(t *testing.T) {
	r := newRig(t)
	link := r.p("sneaky")
	if err := os.Symlink(r.e.Guard.Root, link); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{filepath.Join(r.e.Guard.Root, "versions"), filepath.Join(link, "versions")} {
		_, err := r.apply(declaration(dir(p, "")))
		if err == nil || !strings.Contains(err.Error(), "refused") {
			t.Errorf("%s: err %v, want refused", p, err)
		}
		if _, err := os.Stat(filepath.Join(r.e.Guard.Root, "versions")); err == nil {
			t.Fatalf("%s: created inside the root", p)
		}
	}
}

// snapshot lists every path under dir with its mode and content digest.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, _ := d.Info()
		line := fmt.Sprintf("%s %v", strings.TrimPrefix(p, dir), fi.Mode())
		if fi.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %x", sha256.Sum256(b))
		}
		out = append(out, line)
		return nil
	})
	return strings.Join(out, "\n")
}

// A failed step's error quotes the declaration and the machine, so it is bounded however long
// the id and the applier's error are.
func TestAFailedStepsErrorIsBounded(t *testing.T) {
	r := newRig(t)
	long := r.p(strings.Repeat("x", 200) + "/" + strings.Repeat("y", 100_000))
	rep, err := r.apply(declaration(file(long, "x", "")))
	if err == nil || len(err.Error()) > 1024 || !strings.HasPrefix(err.Error(), "resources[0] file ") {
		t.Fatalf("error of %d bytes: %.200s", len(fmt.Sprint(err)), err)
	}
	if len(rep.Steps) != 1 || len(rep.Steps[0].Error) > 1024 {
		t.Errorf("the step's error is not bounded: %d bytes", len(rep.Steps[0].Error))
	}
}

// A rescue (Engine.Adopt) over an empty ledger adopts what is in its declared state — owned as
// found, untouched — applies only what differs, and removes nothing; its plan says the same.
// Outside a rescue the same steps read "unchanged".
func TestARescueAdoptsWhatIsInStateAndAppliesOnlyDifferences(t *testing.T) {
	r := newRig(t)
	if err := os.Mkdir(r.p("etc"), 0o750); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(r.p("etc/a.conf"), []byte("a=1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	os.Chtimes(r.p("etc/a.conf"), old, old)
	d := declaration(dir(r.p("etc"), "0750"), file(r.p("etc/a.conf"), "a=1\n", "0600"), file(r.p("etc/b.conf"), "b=2\n", "0600"))
	r.e.Adopt = true
	plan, err := r.e.Plan(context.Background(), d)
	if err != nil || actions(plan) != "etc:adopted a.conf:adopted b.conf:changed" || plan.Changed() != 1 {
		t.Fatalf("plan: %s, changed %d, %v", actions(plan), plan.Changed(), err)
	}
	rep, err := r.apply(d)
	if err != nil || actions(rep) != "etc:adopted a.conf:adopted b.conf:created" || rep.Counts[apply.ActionAdopted] != 2 {
		t.Fatalf("rescue apply: %s, %v", actions(rep), err)
	}
	if fi, err := os.Stat(r.p("etc/a.conf")); err != nil || !fi.ModTime().Equal(old) {
		t.Errorf("the adopted file was touched: %v %v", fi.ModTime(), err)
	}
	if got := strings.Join(r.owned(), ","); got != "directory etc created=false,file a.conf created=false,file b.conf created=true" {
		t.Errorf("owned %s", got)
	}
	r.e.Adopt = false
	if again, err := r.apply(d); err != nil || actions(again) != "etc:unchanged a.conf:unchanged b.conf:unchanged" {
		t.Errorf("after the rescue: %s, %v", actions(again), err)
	}
}
