// Package systemd applies "service" resources: a systemd unit enabled or disabled, running or
// stopped.
//
// Optionally it writes the unit's file under /etc/systemd/system; it does all through systemd's
// D-Bus API (go-systemd/v22/dbus), never by running systemctl.
package systemd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire"
)

// Checker refuses a path the host may not manage (apply.Guard: the protected paths, and
// symlinks leading into them).
type Checker interface {
	Check(path string) error
}

// UnitDir is where a declared unit file is written: the administrator's directory, which
// overrides the packages' /lib/systemd/system.
const UnitDir = "/etc/systemd/system"

// Units is the service applier. Its fields say where it looks; Service gives the real ones.
type Units struct {
	Guard Checker
	// Dir is where unit files are written (UnitDir).
	Dir string
	// Booted is the directory whose existence says systemd is PID 1 here (sd_booted(3):
	// /run/systemd/system).
	Booted string
	// Connect opens a connection to systemd; one per Inspect, Apply or Remove, closed after.
	Connect func(ctx context.Context) (*sd.Conn, error)
}

// Service is the applier of "service" resources on this machine's systemd.
func Service(g Checker) apply.Applier {
	return &Units{Guard: g, Dir: UnitDir, Booted: "/run/systemd/system", Connect: sd.NewSystemConnectionContext}
}

// unit is a resource resolved: its unit name, its spec, and its unit file's path.
type unit struct {
	name string
	spec *wire.ServiceSpec
	file string
}

// unitTypes are the suffixes systemd names units by; a name with none of them is a service.
var unitTypes = []string{".service", ".socket", ".timer", ".target", ".path", ".mount", ".automount", ".swap", ".slice", ".scope", ".device"}

// resolve checks r's spec and works out its unit: its name (the resource id by default, ".service"
// added as systemctl would), refused when it is the launcher's by any spelling, and its unit
// file's path, checked by the guard when the spec writes one.
func (u *Units) resolve(r wire.Resource) (unit, error) {
	spec, ok := r.Parsed.(*wire.ServiceSpec)
	if !ok || spec == nil {
		return unit{}, fmt.Errorf("service %s: spec is %T, not a service spec", text.Bound(r.ID), r.Parsed)
	}
	name := spec.Unit
	if name == "" {
		name = r.ID
	}
	if err := wire.CheckManagedUnit(name); err != nil {
		return unit{}, err
	}
	if len(name) > 255 {
		return unit{}, fmt.Errorf("unit %q: longer than systemd's 255 bytes", text.Bound(name))
	}
	if !hasUnitType(name) {
		name += ".service"
		// The launcher's unit again, spelt without its suffix: refused above already, but the
		// name used from here on is this one.
		if err := wire.CheckManagedUnit(name); err != nil {
			return unit{}, err
		}
	}
	switch spec.State {
	case "", "running", "stopped":
	default:
		return unit{}, fmt.Errorf("unit %s: state %q is not \"running\", \"stopped\" or empty", name, text.Bound(spec.State))
	}
	got := unit{name: name, spec: spec, file: filepath.Join(u.Dir, name)}
	if spec.UnitFile != nil {
		if err := u.Guard.Check(got.file); err != nil {
			return unit{}, fmt.Errorf("unit %s: %w", name, err)
		}
	}
	return got, nil
}

func hasUnitType(name string) bool {
	for _, t := range unitTypes {
		if strings.HasSuffix(name, t) && len(name) > len(t) {
			return true
		}
	}
	return false
}

// connect opens a connection to systemd, or says that there is none to manage name with.
func (u *Units) connect(ctx context.Context, name string) (*sd.Conn, error) {
	if _, err := os.Stat(u.Booted); err != nil {
		return nil, fmt.Errorf("systemd is not running here (no system bus): cannot manage unit %s", name)
	}
	c, err := u.Connect(ctx)
	if err != nil {
		return nil, fmt.Errorf("systemd is not running here (no system bus): cannot manage unit %s: %w", name, err)
	}
	return c, nil
}

// state is what systemd and the disk say of a unit now.
type state struct {
	file    []byte // the unit file's content; nil when absent
	enabled string // UnitFileState: "enabled", "disabled", "static", … ; "" when systemd knows no such file
	active  string // ActiveState: "active", "inactive", "failed", …
	stale   bool   // NeedDaemonReload: the file on disk is not what systemd loaded
}

func (u *Units) read(ctx context.Context, c *sd.Conn, un unit) (state, error) {
	var s state
	if un.spec.UnitFile != nil {
		b, err := os.ReadFile(un.file)
		switch {
		case err == nil:
			s.file = b
		case !errors.Is(err, fs.ErrNotExist):
			return s, fmt.Errorf("unit %s: reading its unit file: %w", un.name, err)
		}
	}
	files, err := c.ListUnitFilesByPatternsContext(ctx, nil, []string{un.name})
	if err != nil {
		return s, fmt.Errorf("unit %s: asking systemd for its unit file state: %w", un.name, err)
	}
	for _, f := range files {
		if filepath.Base(f.Path) == un.name {
			s.enabled = f.Type
		}
	}
	props, err := c.GetUnitPropertiesContext(ctx, un.name)
	if err != nil {
		return s, fmt.Errorf("unit %s: asking systemd for its state: %w", un.name, err)
	}
	s.active, _ = props["ActiveState"].(string)
	if s.enabled == "" {
		// An instance (getty@tty2.service) has no unit file of its own to list: systemd's
		// view of the loaded unit says whether it is enabled.
		s.enabled, _ = props["UnitFileState"].(string)
	}
	s.stale, _ = props["NeedDaemonReload"].(bool)
	return s, nil
}

// differences are how s differs from un's spec, one line each.
func differences(un unit, s state) []string {
	var diffs []string
	if spec := un.spec; spec.UnitFile != nil {
		switch {
		case s.file == nil:
			diffs = append(diffs, fmt.Sprintf("unit file %s is absent", un.file))
		case !bytes.Equal(s.file, []byte(*spec.UnitFile)):
			diffs = append(diffs, fmt.Sprintf("unit file %s differs from the declared content", un.file))
		case s.stale:
			diffs = append(diffs, fmt.Sprintf("systemd has not loaded unit file %s as it is on disk (a daemon-reload is due)", un.file))
		}
	}
	if e := un.spec.Enabled; e != nil {
		switch {
		case *e && !isEnabled(s.enabled):
			diffs = append(diffs, fmt.Sprintf("unit %s is %s, declared enabled", un.name, fileState(s.enabled)))
		case !*e && isEnabled(s.enabled):
			diffs = append(diffs, fmt.Sprintf("unit %s is %s, declared disabled", un.name, s.enabled))
		}
	}
	switch un.spec.State {
	case "running":
		if !isRunning(s.active) {
			diffs = append(diffs, fmt.Sprintf("unit %s is %s, declared running", un.name, s.active))
		}
	case "stopped":
		if !isStopped(s.active) {
			diffs = append(diffs, fmt.Sprintf("unit %s is %s, declared stopped", un.name, s.active))
		}
	}
	return diffs
}

func fileState(s string) string {
	if s == "" {
		return "not a unit systemd has a file for"
	}
	return s
}

// isEnabled: systemd's "enabled" (not enabled-runtime, which a reboot forgets).
func isEnabled(s string) bool { return s == "enabled" }

// isRunning: active, or reloading (still active).
func isRunning(s string) bool { return s == "active" || s == "reloading" }

// isStopped: inactive, or failed (not running either; the failure stays visible).
func isStopped(s string) bool { return s == "inactive" || s == "failed" }

// Inspect reads the unit file, its enablement and its state, changing nothing.
func (u *Units) Inspect(ctx context.Context, r wire.Resource) ([]string, error) {
	un, err := u.resolve(r)
	if err != nil {
		return nil, err
	}
	c, err := u.connect(ctx, un.name)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := u.read(ctx, c, un)
	if err != nil {
		return nil, err
	}
	return differences(un, s), nil
}

// Apply writes the unit file when it differs (then reloads systemd), enables or disables it,
// starts or stops it, and restarts it when its file changed while it runs. created says the
// host wrote a unit file where there was none.
func (u *Units) Apply(ctx context.Context, r wire.Resource) (bool, error) {
	un, err := u.resolve(r)
	if err != nil {
		return false, err
	}
	c, err := u.connect(ctx, un.name)
	if err != nil {
		return false, err
	}
	defer c.Close()
	s, err := u.read(ctx, c, un)
	if err != nil {
		return false, err
	}
	created, changed := false, false
	if un.spec.UnitFile != nil && (s.file == nil || !bytes.Equal(s.file, []byte(*un.spec.UnitFile))) {
		if err := writeFile(un.file, []byte(*un.spec.UnitFile)); err != nil {
			return false, fmt.Errorf("unit %s: writing its unit file: %w", un.name, err)
		}
		created, changed = s.file == nil, true
	}
	if changed || (un.spec.UnitFile != nil && s.stale) {
		if err := c.ReloadContext(ctx); err != nil {
			return created, fmt.Errorf("unit %s: reloading systemd after writing its unit file: %w", un.name, err)
		}
	}
	if e := un.spec.Enabled; e != nil && *e != isEnabled(s.enabled) {
		doing := "enabling"
		if *e {
			_, _, err = c.EnableUnitFilesContext(ctx, []string{un.name}, false, false)
		} else {
			doing = "disabling"
			_, err = c.DisableUnitFilesContext(ctx, []string{un.name}, false)
		}
		if err != nil {
			return created, fmt.Errorf("unit %s: %s: %w", un.name, doing, err)
		}
		// As systemctl enable and disable do: the manager reads the links it has just changed.
		if err := c.ReloadContext(ctx); err != nil {
			return created, fmt.Errorf("unit %s: reloading systemd after changing its links: %w", un.name, err)
		}
	}
	switch {
	case un.spec.State == "running" && !isRunning(s.active):
		err = job(ctx, un.name, "starting", c.StartUnitContext)
	case un.spec.State == "stopped" && !isStopped(s.active):
		err = job(ctx, un.name, "stopping", c.StopUnitContext)
	case changed && un.spec.State != "stopped" && isRunning(s.active):
		// It runs the old file: the new one takes effect only by a restart.
		err = job(ctx, un.name, "restarting (its unit file changed)", c.RestartUnitContext)
	}
	return created, err
}

// job runs one of systemd's unit jobs and waits for its result, or for ctx.
func job(ctx context.Context, name, doing string, run func(context.Context, string, string, chan<- string) (int, error)) error {
	done := make(chan string, 1)
	if _, err := run(ctx, name, "replace", done); err != nil {
		return fmt.Errorf("unit %s: %s: %w", name, doing, err)
	}
	select {
	case result := <-done:
		if result != "done" {
			return fmt.Errorf("unit %s: %s: systemd's job ended %q (journalctl -u %s says why)", name, doing, result, name)
		}
		return nil
	case <-ctx.Done():
		return fmt.Errorf("unit %s: %s: gave up waiting for systemd: %w", name, doing, ctx.Err())
	}
}

// Remove undoes a unit the host created — stops and disables it, removes its unit file and
// reloads systemd — and leaves any other unit running as it is.
func (u *Units) Remove(ctx context.Context, o apply.Owned) (string, error) {
	un, err := u.resolve(o.Resource())
	if err != nil {
		return "", err
	}
	if !o.Created || un.spec.UnitFile == nil {
		return "forgotten: the unit was not created by the host", nil
	}
	c, err := u.connect(ctx, un.name)
	if err != nil {
		return "", err
	}
	defer c.Close()
	s, err := u.read(ctx, c, un)
	if err != nil {
		return "", err
	}
	if !isStopped(s.active) && s.active != "" {
		if err := job(ctx, un.name, "stopping", c.StopUnitContext); err != nil {
			return "", err
		}
	}
	if s.enabled != "" && s.enabled != "disabled" {
		if _, err := c.DisableUnitFilesContext(ctx, []string{un.name}, false); err != nil {
			return "", fmt.Errorf("unit %s: disabling: %w", un.name, err)
		}
	}
	if err := os.Remove(un.file); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("unit %s: removing its unit file: %w", un.name, err)
	}
	if err := c.ReloadContext(ctx); err != nil {
		return "", fmt.Errorf("unit %s: reloading systemd after removing its unit file: %w", un.name, err)
	}
	// A unit that failed while stopping stays listed as failed until reset; it is gone now.
	_ = c.ResetFailedUnitContext(ctx, un.name)
	return "removed", nil
}

// writeFile replaces path with body atomically: a temp file beside it, synced, renamed over it,
// and the directory synced, so systemd never reads half a unit file.
func writeFile(path string, body []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(dir, ".mesh-host-*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // after the rename, a no-op
	if _, err := f.Write(body); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
