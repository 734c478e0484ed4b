package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/novox/mesh-host/host"
	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/blobs"
	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/profile"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// apply, plan and owned: the host's engine run once from the command line, over the same
// store.db ledger and the same appliers as the service (host.NewEngine) — one behaviour, two
// sources; only the parser differs (a local file is trusted: it may hold actions, and a node
// left out or "" applies to any node).

// Exit statuses of apply (and plan, owned): 0 applied, 1 a step failed, 2 the input or the
// command line was refused (no root there, another node's declaration), or the host service
// runs. plan exits exitChanges when something would change, as `terraform plan
// -detailed-exitcode` does, so a script can tell "in state" from "would change".
const (
	exitApplied = 0
	exitFailed  = 1
	exitRefused = 2
	exitChanges = 3
)

// maxPrintedSteps bounds what apply and plan print: the report keeps at most 1000 steps, and
// the counts line covers every step.
const maxPrintedSteps = 200

func applyCmd(args []string, stdout, stderr io.Writer) int {
	fs := prog.NewFlagSetWithOperands("apply", "FILE | --bundle LOCK", "Apply a declaration FILE once, with no mesh needed, through the same engine and store as the\n"+
		"host service: each resource inspected, changed only where it differs, read back, recorded as\n"+
		"owned; what an earlier apply owned and FILE no longer declares is removed (only what the host\n"+
		"created). The file is trusted (it may hold actions); its \"node\" must be this node's or empty.\n"+
		"Blobs it names are read from DIR/blobs/sha256/<hex> beside it (or beside the bundle's lock).\n"+
		"It refuses to run while the host service holds the root. Exit 0 applied, 1 a step failed,\n"+
		"2 refused.")
	rootFlag, cfgFlag := rootFlags(fs)
	bundle := fs.String("bundle", "", "apply the bundle whose lock file this is (substrate.lock: its declaration; blobs beside it)")
	asJSON := fs.Bool("json", false, "print the report as JSON")
	src, code, ok := fileOrBundle(fs, args, bundle, stdout, stderr)
	if !ok {
		return code
	}
	cfg, decl, err := load(*rootFlag, *cfgFlag, src)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host apply: %v\n", err)
		return exitRefused
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	// Never beside a running host: two engines over one ledger would each remove what the
	// other applied.
	lock, err := rollback.LockHost(ctx, cfg.Root, 0)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host apply: the host service is running and holds %s; declare this to it instead, or stop mesh-launcher (%v)\n", cfg.Root, err)
		return exitRefused
	}
	defer lock.Unlock()
	st, err := store.Open(ctx, filepath.Join(cfg.Root, store.FileName))
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host apply: %v\n", err)
		return exitFailed
	}
	defer st.Close()
	e := host.NewEngine(cfg.Root, st, blobs.New(host.BlobsDir(cfg.Root), blobs.Dir(filepath.Dir(src)), blobs.Config{}), containerRuntime(ctx, decl, st), nil, nil)
	// A signal stops the apply between steps; the step under way finishes.
	rep, err := e.Apply(context.WithoutCancel(ctx), decl, ctx.Done())
	printReport(stdout, rep, err, *asJSON, false)
	if err != nil {
		if errors.Is(err, apply.ErrStopped) {
			fmt.Fprintln(stderr, "mesh-host apply: stopped between steps by a signal; what was applied is recorded")
		} else {
			fmt.Fprintf(stderr, "mesh-host apply: %v\n", err)
		}
		return exitFailed
	}
	return exitApplied
}

func planCmd(args []string, stdout, stderr io.Writer) int {
	fs := prog.NewFlagSetWithOperands("plan", "FILE | --bundle LOCK", "Say what `mesh-host apply` would change for a declaration FILE (or a bundle), reading the\n"+
		"machine and the host's ledger and changing nothing; it may run beside the host service.\n"+
		"Exit 0 nothing would change, 3 something would change, 1 a resource could not be\n"+
		"inspected, 2 refused (the input, the command line, or no root there).")
	rootFlag, cfgFlag := rootFlags(fs)
	bundle := fs.String("bundle", "", "plan the bundle whose lock file this is")
	asJSON := fs.Bool("json", false, "print the plan as JSON")
	src, code, ok := fileOrBundle(fs, args, bundle, stdout, stderr)
	if !ok {
		return code
	}
	cfg, decl, err := load(*rootFlag, *cfgFlag, src)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host plan: %v\n", err)
		return exitRefused
	}
	ctx := context.Background()
	ledger, done, err := readLedger(ctx, cfg.Root)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host plan: %v\n", err)
		return exitFailed
	}
	defer done()
	// The plan never fetches: a blob it would need is a difference either way.
	e := host.NewEngine(cfg.Root, ledger, blobs.New(host.BlobsDir(cfg.Root), blobs.Dir(filepath.Dir(src)), blobs.Config{}), containerRuntime(ctx, decl, ledger), nil, nil)
	rep, err := e.Plan(ctx, decl)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host plan: %v\n", err)
		return exitFailed
	}
	printReport(stdout, rep, nil, *asJSON, true)
	switch {
	case rep.Counts[apply.ActionFailed] > 0:
		return exitFailed
	case rep.Changed() > 0:
		return exitChanges
	}
	return exitApplied
}

func ownedCmd(args []string, stdout, stderr io.Writer) int {
	fs := prog.NewFlagSet("owned", "List what this host applied and owns, each resource inspected on the machine now: in state,\n"+
		"differs (and how), missing, or unknown (why). Reads the ledger in store.db read-only, so it\n"+
		"may run beside the host service. Exit 0 listed, 1 could not be read, 2 refused (no root\n"+
		"there, a bad host.json).")
	rootFlag, cfgFlag := rootFlags(fs)
	asJSON := fs.Bool("json", false, "print the list as JSON")
	if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
		return code
	}
	cfg, err := config.Load(*rootFlag, *cfgFlag, os.Getenv)
	if err == nil {
		// A mistyped root owns nothing too: say it is not there rather than "owns nothing".
		err = rollback.CheckRoot(cfg.Root)
	}
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host owned: %v\n", err)
		return exitRefused
	}
	ctx := context.Background()
	ledger, done, err := readLedger(ctx, cfg.Root)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host owned: %v\n", err)
		return exitFailed
	}
	defer done()
	e := host.NewEngine(cfg.Root, ledger, blobs.New(host.BlobsDir(cfg.Root), nil, blobs.Config{}), containerRuntime(ctx, wire.Declaration{}, ledger), nil, nil)
	obs, err := e.Observe(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "mesh-host owned: %v\n", err)
		return exitFailed
	}
	if *asJSON {
		if obs == nil {
			obs = []apply.Observed{}
		}
		writeJSON(stdout, obs)
		return 0
	}
	if len(obs) == 0 {
		fmt.Fprintln(stdout, "this host owns nothing")
		return 0
	}
	for _, o := range obs {
		made := "found"
		if o.Created {
			made = "created"
		}
		fmt.Fprintf(stdout, "%-9s %-9s %s  (%s, applied %s)\n", o.State, o.Type, o.ID, made, o.AppliedAt.UTC().Format("2006-01-02T15:04:05Z"))
		for _, d := range o.Diffs {
			fmt.Fprintf(stdout, "    %s\n", d)
		}
		if o.Error != "" {
			fmt.Fprintf(stdout, "    %s\n", o.Error)
		}
	}
	return 0
}

// fileOrBundle parses apply's and plan's command line: FILE, or --bundle LOCK, not both.
func fileOrBundle(fs *flag.FlagSet, args []string, bundle *string, stdout, stderr io.Writer) (string, int, bool) {
	for _, a := range args {
		if a == "--" {
			break
		}
		if n := strings.TrimLeft(a, "-"); n != a && (n == "bundle" || strings.HasPrefix(n, "bundle=")) {
			// --bundle LOCK takes the place of FILE: flags only.
			if code, ok := prog.Parse(fs, args, stdout, stderr); !ok {
				return "", code, false
			}
			if *bundle == "" {
				fmt.Fprintf(stderr, "%s %s: --bundle needs the lock file\nrun `%s %s --help` for usage\n", prog, fs.Name(), prog, fs.Name())
				return "", exitRefused, false
			}
			return *bundle, 0, true
		}
	}
	ops, code, ok := prog.ParseOperands(fs, args, []string{"FILE"}, stdout, stderr)
	if !ok {
		return "", code, false
	}
	return ops[0], 0, true
}

// load reads the host's config and the declaration at path, trusted (a local file or bundle).
func load(root, cfgPath, path string) (config.Config, wire.Declaration, error) {
	cfg, err := config.Load(root, cfgPath, os.Getenv)
	if err != nil {
		return config.Config{}, wire.Declaration{}, err
	}
	f, err := os.Open(path)
	if err != nil {
		return cfg, wire.Declaration{}, fmt.Errorf("read the declaration: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return cfg, wire.Declaration{}, fmt.Errorf("read the declaration: %w", err)
	}
	if err := wire.CheckDeclarationSize(fi.Size(), cfg.MaxDeclarationBytes); err != nil {
		return cfg, wire.Declaration{}, fmt.Errorf("%s: %w (name large contents as blobs, or raise max_declaration_bytes in host.json or MESH_HOST_MAX_DECLARATION_BYTES)", path, err)
	}
	b, err := io.ReadAll(io.LimitReader(f, cfg.MaxDeclarationBytes+1))
	if err != nil {
		return cfg, wire.Declaration{}, fmt.Errorf("read the declaration: %w", err)
	}
	if err := wire.CheckDeclarationSize(int64(len(b)), cfg.MaxDeclarationBytes); err != nil {
		return cfg, wire.Declaration{}, fmt.Errorf("%s: %w", path, err)
	}
	d, err := wire.ParseTrustedDeclaration(b, cfg.Node)
	if err == nil {
		err = wire.CheckDeclarationPaths(d, cfg.Root)
	}
	if errors.Is(err, wire.ErrOtherNode) {
		// Where the id came from is what the operator has to change.
		return cfg, wire.Declaration{}, fmt.Errorf("%s: %s (%s)", path, err, text.Cut(cfg.NodeFrom, wire.MaxErrorBytes))
	}
	if err != nil {
		return cfg, wire.Declaration{}, fmt.Errorf("%s: %s", path, text.Cut(err.Error(), wire.MaxErrorBytes))
	}
	return cfg, d, nil
}

// containerRuntime is the container runtime this machine's profile finds working, detected only when a
// container is declared or owned (detection runs commands and may take seconds).
func containerRuntime(ctx context.Context, d wire.Declaration, ledger apply.Ledger) string {
	if !host.NeedsRuntime(ctx, d, ledger) {
		return ""
	}
	p, err := profile.NewDetector(0).Detect(ctx)
	if err != nil {
		return ""
	}
	return p.ContainerRuntime
}

// readLedger opens the ledger read-only; a root with no store yet owns nothing.
func readLedger(ctx context.Context, root string) (apply.Ledger, func(), error) {
	path := filepath.Join(root, store.FileName)
	if _, err := os.Stat(path); errors.Is(err, os.ErrNotExist) {
		return emptyLedger{}, func() {}, nil
	}
	st, err := store.OpenReadOnly(ctx, path)
	if err != nil {
		return nil, nil, err
	}
	return st, func() { st.Close() }, nil
}

// emptyLedger is the ledger of a root whose host never applied anything.
type emptyLedger struct{}

func (emptyLedger) Owned(context.Context) ([]apply.Owned, error) { return nil, nil }
func (emptyLedger) Record(context.Context, wire.Resource, bool, time.Time) error {
	return errors.New("the ledger is read-only here")
}
func (emptyLedger) Drop(context.Context, string, string) error {
	return errors.New("the ledger is read-only here")
}

// printReport prints each step and a summary line ("nothing changed" when nothing did), or the
// report as JSON. plan words the summary as what would happen.
func printReport(w io.Writer, rep apply.Report, err error, asJSON, plan bool) {
	if asJSON {
		out := struct {
			apply.Report
			Changed int    `json:"changed"`
			Error   string `json:"error,omitempty"`
		}{Report: rep, Changed: rep.Changed()}
		if out.Steps == nil {
			out.Steps = []apply.Step{}
		}
		if out.Drifted == nil {
			out.Drifted = []wire.Drifted{}
		}
		if err != nil {
			out.Error = err.Error()
		}
		writeJSON(w, out)
		return
	}
	total := 0
	for _, n := range rep.Counts {
		total += n
	}
	for i, s := range rep.Steps {
		if i == maxPrintedSteps {
			fmt.Fprintf(w, "… and %d more steps (--json lists up to %d)\n", total-maxPrintedSteps, len(rep.Steps))
			break
		}
		line := fmt.Sprintf("%-9s %-9s %s", s.Action, s.Type, s.ID)
		if s.Note != "" {
			line += " (" + s.Note + ")"
		}
		fmt.Fprintln(w, line)
		for _, d := range s.Diffs {
			fmt.Fprintf(w, "    %s\n", d)
		}
		if s.Error != "" {
			fmt.Fprintf(w, "    %s\n", s.Error)
		}
	}
	var parts []string
	for _, a := range []string{apply.ActionCreated, apply.ActionChanged, apply.ActionRemoved, apply.ActionForgotten, apply.ActionAdopted, apply.ActionUnchanged, apply.ActionKept, apply.ActionFailed} {
		if n := rep.Counts[a]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, a))
		}
	}
	counts := strings.Join(parts, ", ")
	switch {
	case plan && rep.Changed() == 0:
		fmt.Fprintf(w, "plan: nothing would change (%s)\n", orNone(counts))
	case plan:
		fmt.Fprintf(w, "plan: %d would change (%s)\n", rep.Changed(), counts)
	case err != nil:
		fmt.Fprintf(w, "not applied completely: %s\n", orNone(counts))
	case rep.Changed() == 0:
		fmt.Fprintf(w, "nothing changed (%s)\n", orNone(counts))
	default:
		fmt.Fprintf(w, "applied: %s\n", counts)
	}
	if n := len(rep.Drifted); n > 0 {
		fmt.Fprintf(w, "%d drifted and put back\n", n)
	}
}

func orNone(s string) string {
	if s == "" {
		return "no resources"
	}
	return s
}

func writeJSON(w io.Writer, v any) {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}
