// Package containers applies the "container" kind: a container run by Docker or Podman from a
// digest-pinned image.
//
// It drives the runtime through its command-line client.
//
// A runtime normalises what it is given (it names the image by its own spelling, adds
// environment, reorders it), so the container's configuration as the runtime reports it is
// never compared with the spec. Instead every container the host makes carries a label holding
// a digest of the spec that made it; a different label is a different declaration, and the
// container is replaced. The label io.mesh-host.managed=true marks what the host made: it never
// replaces or removes a container without it.
package containers

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/novox/mesh-host/host/apply"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// The labels the host puts on every container it makes.
const (
	// LabelDeclaration holds "sha256:<hex>" of the canonical spec (DeclarationDigest).
	LabelDeclaration = "io.mesh-host.declaration"
	// LabelManaged says the host made the container ("true").
	LabelManaged = "io.mesh-host.managed"
)

// DefaultRestart is the restart policy of a spec that names none: a declared container is
// meant to run, so one found stopped has drifted and is started again.
const DefaultRestart = "unless-stopped"

const (
	// commandTimeout caps one runtime command (inspect, create, start, rm), so a hung daemon
	// cannot hold the reconcile for ever; pullTimeout is longer since images can be large.
	commandTimeout = 10 * time.Minute
	pullTimeout    = 30 * time.Minute
	// startTries and startRetryWait bound starting a stopped container again.
	startTries     = 3
	startRetryWait = time.Second
	// inspectMax bounds what is read of an inspect's JSON (a container's is a few KiB).
	inspectMax = 4 << 20
)

// Options says which runtime to use and where its client is.
type Options struct {
	// Runtime is the runtime the profile found working ("docker" or "podman"), used for a
	// spec that names none; "" when it found none.
	Runtime string
	// Commands maps a runtime name to its executable; a runtime not in it is looked up on
	// PATH by its name when used.
	Commands map[string]string
}

// Container returns the applier of the "container" kind.
func Container(o Options) apply.Applier { return applier{o: o} }

type applier struct{ o Options }

// errNoRuntime is the step's failure on a machine without a working runtime.
var errNoRuntime = errors.New("no working container runtime on this machine (the profile found none)")

// Inspect reports "absent", "declared differently (label …, declared …)", a container the host
// did not make, or one that should run and does not.
func (a applier) Inspect(ctx context.Context, r wire.Resource) ([]string, error) {
	d, err := a.desired(r)
	if err != nil {
		return nil, err
	}
	cur, err := d.rt.inspect(ctx, d.name)
	if err != nil {
		return nil, err
	}
	switch {
	case cur == nil:
		return []string{"absent"}, nil
	case !cur.managed():
		return []string{fmt.Sprintf("a container named %s exists that the host did not make (no %s=true label)", d.name, LabelManaged)}, nil
	case cur.label() != d.digest:
		return []string{fmt.Sprintf("declared differently (label %s, declared %s)", orNone(cur.label()), d.digest)}, nil
	case cur.needsStart(d.restart):
		return []string{cur.notRunning()}, nil
	}
	return nil, nil
}

// Apply makes the container match: the image pulled by digest when missing, a container made
// from another declaration removed and made again, a stopped one started. created is true
// when no container of that name existed.
func (a applier) Apply(ctx context.Context, r wire.Resource) (bool, error) {
	d, err := a.desired(r)
	if err != nil {
		return false, err
	}
	cur, err := d.rt.inspect(ctx, d.name)
	if err != nil {
		return false, err
	}
	if cur != nil && !cur.managed() {
		return false, fmt.Errorf("a container named %s exists that the host did not make (no %s=true label); the host leaves it: remove or rename it, or declare another name", d.name, LabelManaged)
	}
	if cur != nil && cur.label() == d.digest {
		if cur.needsStart(d.restart) {
			return false, d.startStopped(ctx)
		}
		return false, nil
	}
	// The image first: a pull that fails leaves the old container as it was.
	if _, err := d.rt.run(ctx, commandTimeout, "image", "inspect", "--format", "{{.Id}}", d.spec.Image); err != nil {
		if _, err := d.rt.run(ctx, pullTimeout, "pull", d.spec.Image); err != nil {
			return false, err
		}
	}
	if cur != nil {
		if _, err := d.rt.run(ctx, commandTimeout, "rm", "-f", d.name); err != nil {
			return false, err
		}
	}
	if _, err := d.rt.run(ctx, commandTimeout, d.createArgs()...); err != nil {
		return false, err
	}
	if _, err := d.rt.run(ctx, commandTimeout, "start", d.name); err != nil {
		return false, fmt.Errorf("created, but it would not start: %w", err)
	}
	return cur == nil, nil
}

// startStopped starts again a container found stopped. Just after a container stops, its
// runtime may still be clearing the old run away, and a start then fails (under podman, runc's
// "container with given ID already exists"); a few tries a second apart ride that out, and a
// start that keeps failing is reported as the last try failed.
func (d desired) startStopped(ctx context.Context) error {
	var err error
	for try := range startTries {
		if try > 0 {
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (the start before: %w)", ctx.Err(), err)
			case <-time.After(startRetryWait):
			}
		}
		if _, err = d.rt.run(ctx, commandTimeout, "start", d.name); err == nil {
			return nil
		}
	}
	return err
}

// Remove removes a container the host created and that carries its managed label; anything
// else is forgotten and left as it is.
func (a applier) Remove(ctx context.Context, o apply.Owned) (string, error) {
	d, err := a.desired(o.Resource())
	if err != nil {
		return "", err
	}
	if !o.Created {
		return fmt.Sprintf("forgotten: container %s existed before the host applied it", d.name), nil
	}
	cur, err := d.rt.inspect(ctx, d.name)
	if err != nil {
		return "", err
	}
	switch {
	case cur == nil:
		return "removed (it was already gone)", nil
	case !cur.managed():
		return fmt.Sprintf("forgotten: container %s does not carry the %s=true label, so the host did not make it", d.name, LabelManaged), nil
	}
	if _, err := d.rt.run(ctx, commandTimeout, "rm", "-f", d.name); err != nil {
		return "", err
	}
	return "removed", nil
}

// desired is a spec made ready to apply: checked, defaults filled, its runtime found.
type desired struct {
	spec    *wire.ContainerSpec
	name    string
	restart string
	digest  string // "sha256:<hex>", the declaration label's value
	rt      runtime
}

var (
	// A name as Docker and Podman accept it; it cannot begin with "-" and so never reads as
	// a flag.
	nameRE    = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	restartRE = regexp.MustCompile(`^(no|always|unless-stopped|on-failure(:[0-9]{1,4})?)$`)
	envKeyRE  = regexp.MustCompile(`^[^=\x00]+$`)
)

func (a applier) desired(r wire.Resource) (desired, error) {
	s, err := specOf(r)
	if err != nil {
		return desired{}, err
	}
	d := desired{spec: s, name: s.Name, restart: s.Restart}
	if d.name == "" {
		d.name = r.ID
	}
	if d.restart == "" {
		d.restart = DefaultRestart
	}
	if err := check(d); err != nil {
		return desired{}, fmt.Errorf("container spec: %w", err)
	}
	d.digest = DeclarationDigest(d.name, *s)
	rt := s.Runtime
	if rt == "" {
		rt = a.o.Runtime
	}
	switch rt {
	case "":
		return desired{}, errNoRuntime
	case "docker", "podman":
	default:
		return desired{}, fmt.Errorf("container runtime %q: not docker or podman", text.Bound(rt))
	}
	exe := a.o.Commands[rt]
	if exe == "" {
		if exe, err = exec.LookPath(rt); err != nil {
			return desired{}, fmt.Errorf("container runtime %s: %w", rt, err)
		}
	}
	d.rt = runtime{name: rt, exe: exe}
	return d, nil
}

// check refuses what the runtime would misread: every value goes to its command line.
func check(d desired) error {
	switch {
	case !nameRE.MatchString(d.name):
		return fmt.Errorf("name %q: want letters, digits, '_', '.', '-', beginning with a letter or digit", text.Bound(d.name))
	case wire.CheckPinnedImage(d.spec.Image) != nil:
		return wire.CheckPinnedImage(d.spec.Image) // the parser's rule, so what declare accepts runs
	case !restartRE.MatchString(d.restart):
		return fmt.Errorf("restart %q: want no, always, unless-stopped or on-failure[:N]", text.Bound(d.restart))
	}
	for k := range d.spec.Env {
		if !envKeyRE.MatchString(k) {
			return fmt.Errorf("env key %q: empty or holds '='", text.Bound(k))
		}
	}
	return nil
}

// DeclarationDigest is the declaration label's value for a container named name made from s:
// "sha256:" and the hex SHA-256 of the spec's JSON with the name and restart policy resolved
// and the runtime left out (where a container runs is not what it is). encoding/json writes
// struct fields in their order and map keys sorted, so the same spec always gives the same
// digest.
func DeclarationDigest(name string, s wire.ContainerSpec) string {
	s.Name = name
	if s.Restart == "" {
		s.Restart = DefaultRestart
	}
	s.Runtime = ""
	b, err := json.Marshal(s)
	if err != nil { // a struct of strings cannot fail to marshal
		panic(err)
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// createArgs is the create command. Every option is written --opt=value, so no value can be
// read as another option; the image (checked) ends the options and the command follows it.
func (d desired) createArgs() []string {
	args := []string{"create", "--name=" + d.name,
		"--label=" + LabelDeclaration + "=" + d.digest,
		"--label=" + LabelManaged + "=true",
		"--restart=" + d.restart}
	keys := make([]string, 0, len(d.spec.Env))
	for k := range d.spec.Env {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		args = append(args, "--env="+k+"="+d.spec.Env[k])
	}
	for _, p := range d.spec.Ports {
		args = append(args, "--publish="+p)
	}
	for _, v := range d.spec.Volumes {
		args = append(args, "--volume="+v)
	}
	args = append(args, d.spec.Image)
	return append(args, d.spec.Command...)
}

// specOf returns r's spec: the parser's when set, else decoded here (strictly, as the parser
// would) so a resource read back from the ledger without it still works.
func specOf(r wire.Resource) (*wire.ContainerSpec, error) {
	switch p := r.Parsed.(type) {
	case *wire.ContainerSpec:
		return p, nil
	case nil:
		s := new(wire.ContainerSpec)
		if len(r.Spec) > 0 && string(r.Spec) != "null" {
			if err := wire.DecodeStrict(r.Spec, s); err != nil {
				return nil, fmt.Errorf("container spec: %w", err)
			}
		}
		return s, nil
	default:
		return nil, fmt.Errorf("container spec: got %T, want *wire.ContainerSpec", r.Parsed)
	}
}

// state is the part of a runtime's inspect output the applier reads; Docker and Podman
// share these names.
type state struct {
	Name   string `json:"Name"` // Docker writes "/name", Podman "name"
	Config struct {
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
	State struct {
		Status   string `json:"Status"`
		Running  bool   `json:"Running"`
		ExitCode int    `json:"ExitCode"`
	} `json:"State"`
}

func (s *state) managed() bool { return s.Config.Labels[LabelManaged] == "true" }
func (s *state) label() string { return s.Config.Labels[LabelDeclaration] }

// needsStart says the container should be running and is not: made and never started, or
// stopped under a policy that means "keep it running" (on-failure: only after a failure).
func (s *state) needsStart(restart string) bool {
	if s.State.Running {
		return false
	}
	switch {
	case s.State.Status == "created":
		return true
	case restart == "always", restart == "unless-stopped":
		return true
	case strings.HasPrefix(restart, "on-failure"):
		return s.State.ExitCode != 0
	}
	return false
}

func (s *state) notRunning() string {
	if s.State.Status == "created" {
		return "not running (created, never started)"
	}
	return fmt.Sprintf("not running (%s, exit code %d)", text.Printable(text.Bound(s.State.Status)), s.State.ExitCode)
}

// orNone quotes a label read from the runtime: bounded, but long enough for a whole digest.
func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return text.Printable(text.Cut(s, 100))
}

// runtime is one runtime's client.
type runtime struct{ name, exe string }

// inspect returns the container's state, or nil when there is none of that name.
func (rt runtime) inspect(ctx context.Context, name string) (*state, error) {
	out, err := rt.run(ctx, commandTimeout, "container", "inspect", "--format", "{{json .}}", name)
	if err != nil {
		var fe *failure
		if errors.As(err, &fe) && fe.notFound() {
			return nil, nil
		}
		return nil, err
	}
	out = bytes.TrimSpace(out)
	// Docker writes the object the format names; Podman, a list of them.
	var list []state
	if bytes.HasPrefix(out, []byte("[")) {
		if err := json.Unmarshal(out, &list); err != nil {
			return nil, fmt.Errorf("%s container inspect %s: reading its output: %w", rt.name, name, err)
		}
	} else {
		var one state
		if err := json.Unmarshal(out, &one); err != nil {
			return nil, fmt.Errorf("%s container inspect %s: reading its output: %w", rt.name, name, err)
		}
		list = append(list, one)
	}
	// inspect also finds a container by a prefix of its ID: only one of this name counts.
	if len(list) == 0 || strings.TrimPrefix(list[0].Name, "/") != name {
		return nil, nil
	}
	return &list[0], nil
}

// failure is a runtime command that ran and failed.
type failure struct {
	rt, verb string
	status   string
	output   string // bounded, printable
}

func (f *failure) Error() string {
	return fmt.Sprintf("%s %s failed (%s): %s", f.rt, f.verb, f.status, f.output)
}

// notFound says the runtime answered that there is no such container. Docker: "No such
// container: x" / "No such object: x"; Podman: "no such container x".
func (f *failure) notFound() bool {
	o := strings.ToLower(f.output)
	return strings.Contains(o, "no such container") || strings.Contains(o, "no such object")
}

// run runs the runtime's client with args and returns its standard output (bounded). A
// command that fails returns a *failure quoting its output, bounded.
func (rt runtime) run(parent context.Context, limit time.Duration, args ...string) ([]byte, error) {
	verb := args[0]
	if verb == "container" || verb == "image" {
		verb += " " + args[1]
	}
	ctx, cancel := context.WithTimeout(parent, limit)
	defer cancel()
	stdout := &capped{max: inspectMax}
	stderr := &apply.Output{}
	cmd := exec.CommandContext(ctx, rt.exe, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.WaitDelay = 5 * time.Second
	err := cmd.Run()
	switch {
	case parent.Err() != nil:
		return nil, fmt.Errorf("%s %s: %w", rt.name, verb, parent.Err())
	case ctx.Err() != nil:
		return nil, fmt.Errorf("%s %s did not finish within %s, killed: %w", rt.name, verb, limit, ctx.Err())
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		if stdout.over {
			return nil, fmt.Errorf("%s %s: output over %d bytes", rt.name, verb, inspectMax)
		}
		return stdout.b.Bytes(), nil
	case errors.As(err, &exit):
		out := stderr.String()
		if out == "" { // some clients write their errors to standard output
			ht := &apply.Output{}
			ht.Write(stdout.b.Bytes())
			out = ht.String()
		}
		if out == "" {
			out = "(no output)"
		}
		status := exit.ProcessState.String()
		if code := exit.ExitCode(); code >= 0 {
			status = fmt.Sprintf("exit %d", code)
		}
		return nil, &failure{rt: rt.name, verb: verb, status: status, output: out}
	default:
		return nil, fmt.Errorf("%s %s could not be run (%s): %w", rt.name, verb, text.Bound(rt.exe), err)
	}
}

// capped keeps up to max bytes and notes whether more came.
type capped struct {
	b    bytes.Buffer
	max  int
	over bool
}

func (c *capped) Write(p []byte) (int, error) {
	if room := c.max - c.b.Len(); len(p) > room {
		c.over = true
		c.b.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return c.b.Write(p)
}
