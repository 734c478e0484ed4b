package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/novox/mesh-host/host"
	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/apply/files"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/enrol"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/logkey"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

const rescueAbout = `Derive this node's local state again from the mesh (docs/decisions/0048): set store.db, the
applied records (ROOT/applied), the blob cache and the kept rollout plan aside under
ROOT/rescued/<time>/, keep the node's identity (or enrol it anew with --token), fetch its
declaration from the bus, and adopt what is already in its declared state as it is (a file's
mtime untouched; a package at the declared version, a service in the declared state, a container
carrying its declaration's label). Only differences are applied; nothing is removed: with no store,
nothing on the machine was applied by this host. The versions under ROOT/versions are hashed and
checked against records.db; a binary that no longer matches is set aside too. Never versions/,
records.db, host.json, node.creds or ca.pem otherwise.

Stop the host service first (systemctl stop mesh-launcher), then start it again: it reports the
rescue in its heartbeat. --dry-run says all of it and changes nothing, beside the service too.

Exit status: 0 rescued (dry run: nothing would change), 1 a step failed or the declaration could not
be fetched, 2 refused (the command line, the root, the service running, a token for another node),
3 (dry run) something would change.`

func rescueCmd(args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := prog.NewFlagSet("rescue", rescueAbout)
	rootFlag, cfgFlag := rootFlags(fs)
	token := fs.String("token", "", "enrol the node anew with this one-time `TOKEN` (its credentials were revoked or lost); the token must be for this node")
	dry := fs.Bool("dry-run", false, "say what the rescue would set aside, adopt, change and set aside of the versions; change nothing")
	asJSON := fs.Bool("json", false, "print the rescue as JSON")
	wait := fs.Duration("wait", time.Minute, "how long to wait for the bus to send the node's declaration")
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	refuse := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "mesh-host rescue: "+format+"\n", a...)
		return exitRefused
	}
	if *dry && *token != "" {
		return refuse("--dry-run changes nothing, so it cannot enrol with --token; run the dry run without it")
	}
	cfg, err := config.Load(*rootFlag, *cfgFlag, getenv)
	if err == nil {
		err = rollback.CheckRoot(cfg.Root)
	}
	if err != nil {
		return refuse("%v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	if !*dry {
		// Never beside a running host: it holds the store this sets aside.
		lock, err := rollback.LockHost(ctx, cfg.Root, 0)
		if err != nil {
			return refuse("the host service is running and holds %s: stop it first (systemctl stop mesh-launcher), rescue, then start it (%v)", cfg.Root, err)
		}
		defer lock.Unlock()
	}
	if *token != "" {
		said := stdout
		if *asJSON {
			said = stderr // stdout is the JSON document alone
		}
		if code, ok := rescueEnrol(ctx, cfg, *token, said, stderr); !ok {
			return code
		}
		if cfg, err = config.Load(*rootFlag, *cfgFlag, getenv); err != nil {
			return refuse("%v", err)
		}
	}
	r := &rescue{cfg: cfg, dry: *dry, out: stdout, errOut: stderr}
	return r.run(ctx, *wait, *asJSON)
}

// rescueEnrol enrols the node again with token, as `mesh-host enrol --replace` would, refusing a
// token for another node: a rescue keeps the node's identity.
func rescueEnrol(ctx context.Context, cfg config.Config, token string, stdout, stderr io.Writer) (int, bool) {
	tok, err := wire.ParseToken(token)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host rescue: --token: %v\n", err)
		return exitRefused, false
	}
	if tok.Node != "" && tok.Node != cfg.Node {
		fmt.Fprintf(stderr, "mesh-host rescue: the token is for node %s, and this root is node %s: a rescue keeps the node's identity (to make this machine another node, use mesh-host enrol --replace)\n", tok.Node, cfg.Node)
		return exitRefused, false
	}
	timeout := 15 * time.Second
	ctx, cancel := context.WithTimeout(ctx, time.Duration(len(tok.URLs)+1)*timeout)
	defer cancel()
	res, err := enrol.Enrol(ctx, enrol.Options{Token: token, Root: cfg.Root, Node: cfg.Node, Replace: true, Timeout: timeout})
	if err != nil {
		var refused *enrol.RefusedError
		msg := err.Error()
		if errors.As(err, &refused) {
			msg = refused.Error()
		}
		fmt.Fprintf(stderr, "mesh-host rescue: enrolling anew: %s\n", strings.TrimPrefix(msg, "enrol: "))
		return exitFailed, false
	}
	fmt.Fprintf(stdout, "enrolled node %s anew (key %s) through %s\n", res.Node, res.PublicKey, res.URL)
	return 0, true
}

// rescue is one run of the command.
type rescue struct {
	cfg         config.Config
	dry         bool
	out, errOut io.Writer
}

// rescueReport is what the command prints with --json.
type rescueReport struct {
	Node       string              `json:"node"`
	DryRun     bool                `json:"dry_run"`
	Revision   uint64              `json:"declaration_revision"`
	MovedTo    string              `json:"moved_to,omitempty"`
	MovedAside []string            `json:"moved_aside"`
	Versions   []host.VersionCheck `json:"versions"`
	Records    string              `json:"records,omitempty"` // why the versions were not checked
	Adopted    int                 `json:"adopted"`
	Changed    int                 `json:"changed"`
	Failed     int                 `json:"failed"`
	NotAdopted []string            `json:"not_adopted"`
	Report     apply.Report        `json:"report"`
	Error      string              `json:"error,omitempty"`
	Pending    bool                `json:"pending,omitempty"` // stopped: the host finishes the rescue
}

func (r *rescue) run(ctx context.Context, wait time.Duration, asJSON bool) int {
	log := logkey.Text(r.errOut, &slog.HandlerOptions{Level: slog.LevelError}).With("component", "rescue")
	f, err := host.FetchDeclaration(ctx, r.cfg, wait, log)
	if err != nil {
		fmt.Fprintf(r.errOut, "mesh-host rescue: %v\n", err)
		return exitFailed
	}
	defer f.Close()
	rep := rescueReport{Node: r.cfg.Node, DryRun: r.dry, Revision: f.Revision, MovedAside: []string{}, Versions: []host.VersionCheck{}}
	if records, err := rollback.OpenForHost(ctx, r.cfg.Root); err != nil {
		rep.Records = fmt.Sprintf("versions not checked: %v", err)
	} else {
		rep.Versions, err = host.CheckVersions(ctx, r.cfg.Root, records)
		records.Close()
		if err != nil {
			fmt.Fprintf(r.errOut, "mesh-host rescue: checking the versions: %v\n", err)
			return exitFailed
		}
	}
	var code int
	if r.dry {
		code = r.plan(ctx, f, &rep)
	} else {
		code = r.apply(ctx, f, &rep)
	}
	if rep.Versions == nil {
		rep.Versions = []host.VersionCheck{}
	}
	if asJSON {
		if rep.Report.Steps == nil {
			rep.Report.Steps = []apply.Step{}
		}
		if rep.Report.Drifted == nil {
			rep.Report.Drifted = []wire.Drifted{}
		}
		if rep.NotAdopted == nil {
			rep.NotAdopted = []string{}
		}
		writeJSON(r.out, rep)
	} else {
		r.print(rep)
	}
	return code
}

// plan is the dry run: the declaration inspected against an empty ledger, with a blob cache and
// archive records in a temporary directory, so nothing under the root is written.
func (r *rescue) plan(ctx context.Context, f *host.Fetched, rep *rescueReport) int {
	present, err := host.PresentLocalState(r.cfg.Root)
	if err != nil {
		fmt.Fprintf(r.errOut, "mesh-host rescue: %v\n", err)
		return exitFailed
	}
	rep.MovedAside = append(rep.MovedAside, present...)
	tmp, err := os.MkdirTemp("", "mesh-host-rescue-*")
	if err != nil {
		fmt.Fprintf(r.errOut, "mesh-host rescue: %v\n", err)
		return exitFailed
	}
	defer os.RemoveAll(tmp)
	b := f.Blobs(filepath.Join(tmp, "blobs"))
	e := host.NewEngine(r.cfg.Root, emptyLedger{}, b, containerRuntime(ctx, f.Declaration, emptyLedger{}), nil, nil)
	e.Appliers[wire.KindArchive] = files.Archive(e.Guard, b, tmp)
	e.Adopt = true
	out, err := e.Plan(ctx, f.Declaration)
	if err != nil {
		fmt.Fprintf(r.errOut, "mesh-host rescue: %v\n", err)
		return exitFailed
	}
	r.summarize(rep, out, nil)
	switch {
	case rep.Failed > 0:
		return exitFailed
	case rep.Changed > 0 || setAside(rep.Versions) > 0:
		return exitChanges
	}
	return exitApplied
}

// apply is the rescue: the local state set aside, a new store holding the fetched declaration,
// the versions that no longer match set aside, and the declaration applied adopting what is in
// state. The rescue is recorded in the new store before the apply, so a rescue stopped midway is
// finished by the host when it starts.
func (r *rescue) apply(ctx context.Context, f *host.Fetched, rep *rescueReport) int {
	fail := func(err error) int {
		rep.Error = err.Error()
		fmt.Fprintf(r.errOut, "mesh-host rescue: %v\n", err)
		return exitFailed
	}
	dir, moved, err := host.SetAside(r.cfg.Root, time.Now())
	rep.MovedTo, rep.MovedAside = dir, append(rep.MovedAside, moved...)
	if err != nil {
		return fail(err)
	}
	if err := host.SetVersionsAside(r.cfg.Root, dir, rep.Versions); err != nil {
		return fail(err)
	}
	st, err := store.Open(ctx, filepath.Join(r.cfg.Root, store.FileName))
	if err != nil {
		return fail(err)
	}
	defer st.Close()
	if old := filepath.Join(dir, store.FileName); fileExists(old) {
		// What the old store knew of accepted sequence numbers and withdrawn versions is kept
		// when it can still be read; the bus sends the current values again either way.
		if err := st.CarryTrust(ctx, old); err != nil {
			fmt.Fprintf(r.errOut, "mesh-host rescue: the store set aside could not be read (%v); the accepted values and withdrawn versions come from the bus again\n", err)
		}
	}
	var names []string
	for _, v := range rep.Versions {
		if v.SetAside != "" {
			names = append(names, v.Version)
		}
	}
	if err := st.BeginRescue(ctx, "mesh-host rescue", dir, names); err != nil {
		return fail(err)
	}
	if err := st.Hold(ctx, f.Raw, f.Revision); err != nil {
		return fail(err)
	}
	e := host.NewEngine(r.cfg.Root, st, f.Blobs(host.BlobsDir(r.cfg.Root)), containerRuntime(ctx, f.Declaration, st), nil, nil)
	e.Adopt = true
	// A signal stops the apply between steps; the step under way finishes.
	out, err := e.Apply(context.WithoutCancel(ctx), f.Declaration, ctx.Done())
	r.summarize(rep, out, err)
	if errors.Is(err, apply.ErrStopped) {
		rep.Pending = true
		fmt.Fprintln(r.errOut, "mesh-host rescue: stopped between steps by a signal; the host finishes the rescue when it starts")
		return exitFailed
	}
	sum := host.RescueSummary(out)
	sum.OK = err == nil
	if rerr := st.EndRescue(ctx, sum); rerr != nil {
		return fail(rerr)
	}
	if err != nil {
		fmt.Fprintf(r.errOut, "mesh-host rescue: %v\n", err)
		return exitFailed
	}
	return exitApplied
}

func (r *rescue) summarize(rep *rescueReport, out apply.Report, err error) {
	sum := host.RescueSummary(out)
	rep.Report, rep.Adopted, rep.Changed, rep.Failed, rep.NotAdopted = out, sum.Adopted, sum.Changed, sum.Failed, sum.NotAdopted
	if err != nil {
		rep.Error = err.Error()
	}
}

func (r *rescue) print(rep rescueReport) {
	w := r.out
	verb := "rescued"
	if rep.DryRun {
		verb = "dry run: would rescue"
	}
	fmt.Fprintf(w, "%s node %s from its declaration on the bus (revision %d)\n", verb, rep.Node, rep.Revision)
	switch {
	case len(rep.MovedAside) == 0:
		fmt.Fprintln(w, "no local state to set aside")
	case rep.DryRun:
		fmt.Fprintf(w, "would set aside: %s\n", strings.Join(rep.MovedAside, ", "))
	default:
		fmt.Fprintf(w, "set aside into %s: %s\n", rep.MovedTo, strings.Join(rep.MovedAside, ", "))
	}
	if rep.Records != "" {
		fmt.Fprintln(w, rep.Records)
	}
	for _, v := range rep.Versions {
		switch {
		case v.SetAside != "":
			fmt.Fprintf(w, "version %s set aside to %s: %s\n", v.Version, v.SetAside, v.Problem)
		case v.Problem != "":
			fmt.Fprintf(w, "version %s would be set aside: %s\n", v.Version, v.Problem)
		case v.Recorded == "":
			fmt.Fprintf(w, "version %s: no record (the launcher records it as found)\n", v.Version)
		default:
			fmt.Fprintf(w, "version %s matches its recorded digest\n", v.Version)
		}
	}
	printReport(w, rep.Report, nil, false, rep.DryRun)
	would := ""
	if rep.DryRun {
		would = "would be "
	}
	fmt.Fprintf(w, "adopted as they were: %d; %screated or changed to match: %d; could not be applied: %d; nothing removed\n", rep.Adopted, would, rep.Changed, rep.Failed)
	if !rep.DryRun && rep.Error == "" {
		fmt.Fprintln(w, "start the host service again: systemctl start mesh-launcher")
	}
}

func setAside(vs []host.VersionCheck) int {
	n := 0
	for _, v := range vs {
		if v.Problem != "" {
			n++
		}
	}
	return n
}

func fileExists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
