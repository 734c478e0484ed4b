package systemd

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	sd "github.com/coreos/go-systemd/v22/dbus"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
)

// These tests run on this machine and so never reach systemd: they check what the applier
// decides before it asks systemd anything. What it does with systemd is proved in the
// real-systemd lab (lab/systemd, appliers_test.go).

// lexical is the guard's lexical half (the symlink half is apply.Guard's own test).
type lexical struct{}

func (lexical) Check(p string) error { return wire.CheckManagedPath(p, "") }

func units(t *testing.T) *Units {
	dir := t.TempDir()
	return &Units{
		Guard:  lexical{},
		Dir:    filepath.Join(dir, "etc/systemd/system"),
		Booted: filepath.Join(dir, "run/systemd/system"), // absent: no systemd here
		Connect: func(context.Context) (*sd.Conn, error) {
			t.Fatal("the applier connected to systemd where it should not have")
			return nil, nil
		},
	}
}

func service(id string, spec wire.ServiceSpec) wire.Resource {
	raw, _ := json.Marshal(spec)
	return wire.Resource{Type: "service", ID: id, Spec: raw, Parsed: &spec}
}

func ptr[T any](v T) *T { return &v }

func TestResolveNamesTheUnitAndItsFile(t *testing.T) {
	u := units(t)
	for _, tc := range []struct {
		name     string
		id       string
		spec     wire.ServiceSpec
		wantUnit string
	}{
		{"the id is the unit by default", "app.service", wire.ServiceSpec{}, "app.service"},
		{"unit overrides the id", "web", wire.ServiceSpec{Unit: "nginx.service"}, "nginx.service"},
		{"a name without a type is a service, as systemctl reads it", "app", wire.ServiceSpec{}, "app.service"},
		{"a timer keeps its type", "backup.timer", wire.ServiceSpec{State: "running"}, "backup.timer"},
		{"a template instance is a unit like any", "getty@tty2.service", wire.ServiceSpec{Enabled: ptr(true)}, "getty@tty2.service"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			un, err := u.resolve(service(tc.id, tc.spec))
			if err != nil {
				t.Fatal(err)
			}
			if un.name != tc.wantUnit || un.file != filepath.Join(u.Dir, tc.wantUnit) {
				t.Errorf("unit %q file %q, want %q in %s", un.name, un.file, tc.wantUnit, u.Dir)
			}
		})
	}
}

func TestResolveRefuses(t *testing.T) {
	u := units(t)
	for _, tc := range []struct {
		name string
		r    wire.Resource
		want string
	}{
		{"the launcher's unit by its name", service("x", wire.ServiceSpec{Unit: "mesh-launcher.service", State: "stopped"}), "the launcher's own unit"},
		{"the launcher's unit as the id", service("mesh-launcher.service", wire.ServiceSpec{Enabled: ptr(false)}), "the launcher's own unit"},
		{"the launcher's unit without its suffix", service("mesh-launcher", wire.ServiceSpec{State: "stopped"}), "the launcher's own unit"},
		{"the launcher's unit with a unit file", service("mesh-launcher.service", wire.ServiceSpec{UnitFile: ptr("[Service]\nExecStart=/bin/true\n")}), "the launcher's own unit"},
		{"a unit name with a slash", service("../../mesh-launcher.service", wire.ServiceSpec{}), "holds no '/'"},
		{"a state that is neither running nor stopped", service("app.service", wire.ServiceSpec{State: "restarted"}), `state "restarted" is not`},
		{"a spec of another kind", wire.Resource{Type: "service", ID: "app", Parsed: &wire.FileSpec{}}, "not a service spec"},
		{"a unit name longer than systemd takes", service(strings.Repeat("a", 250)+".service", wire.ServiceSpec{}), "longer than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := u.resolve(tc.r)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("resolve: %v, want an error saying %q", err, tc.want)
			}
		})
	}
}

// refuseAll is a guard that refuses every path, as the real one refuses a symlink into the root.
type refuseAll struct{}

func (refuseAll) Check(p string) error { return os.ErrPermission }

func TestGuardChecksTheUnitFileOnlyWhenOneIsDeclared(t *testing.T) {
	u := units(t)
	u.Guard = refuseAll{}
	if _, err := u.resolve(service("app.service", wire.ServiceSpec{State: "running"})); err != nil {
		t.Errorf("a spec without a unit file: %v, want no path checked", err)
	}
	_, err := u.resolve(service("app.service", wire.ServiceSpec{UnitFile: ptr("[Unit]\n")}))
	if err == nil || !strings.Contains(err.Error(), "unit app.service") {
		t.Errorf("a unit file the guard refuses: %v, want refused naming the unit", err)
	}
}

func TestWithoutSystemdEveryStepSaysSo(t *testing.T) {
	u := units(t)
	r := service("app.service", wire.ServiceSpec{State: "running", UnitFile: ptr("[Service]\nExecStart=/bin/sleep infinity\n")})
	want := "systemd is not running here (no system bus): cannot manage unit app.service"
	ctx := context.Background()
	if _, err := u.Inspect(ctx, r); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Inspect: %v, want %q", err, want)
	}
	if _, err := u.Apply(ctx, r); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Apply: %v, want %q", err, want)
	}
	if _, err := os.Stat(filepath.Join(u.Dir, "app.service")); err == nil {
		t.Errorf("Apply wrote the unit file with no systemd to load it")
	}
	o := apply.Owned{Type: r.Type, ID: r.ID, Spec: r.Spec, Parsed: r.Parsed, Created: true}
	if _, err := u.Remove(ctx, o); err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Remove: %v, want %q", err, want)
	}
}

func TestRemoveForgetsAUnitTheHostDidNotCreate(t *testing.T) {
	u := units(t) // no systemd: forgetting asks it nothing
	for _, tc := range []struct {
		name    string
		spec    wire.ServiceSpec
		created bool
	}{
		{"a unit only enabled and started", wire.ServiceSpec{Enabled: ptr(true), State: "running"}, false},
		{"a unit file that was there before", wire.ServiceSpec{UnitFile: ptr("[Unit]\n")}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := service("app.service", tc.spec)
			got, err := u.Remove(context.Background(), apply.Owned{Type: r.Type, ID: r.ID, Spec: r.Spec, Parsed: r.Parsed, Created: tc.created})
			if err != nil || got != "forgotten: the unit was not created by the host" {
				t.Errorf("Remove: %q %v, want forgotten", got, err)
			}
		})
	}
}

func TestDifferences(t *testing.T) {
	body := "[Service]\nExecStart=/bin/sleep infinity\n"
	un := func(spec wire.ServiceSpec) unit {
		return unit{name: "app.service", spec: &spec, file: "/etc/systemd/system/app.service"}
	}
	for _, tc := range []struct {
		name string
		spec wire.ServiceSpec
		s    state
		want []string
	}{
		{"nothing declared differs from nothing", wire.ServiceSpec{}, state{active: "failed", enabled: "disabled"}, nil},
		{"in its declared state", wire.ServiceSpec{Enabled: ptr(true), State: "running", UnitFile: &body},
			state{file: []byte(body), enabled: "enabled", active: "active"}, nil},
		{"absent unit file, not loaded, not running", wire.ServiceSpec{Enabled: ptr(true), State: "running", UnitFile: &body},
			state{active: "inactive"}, []string{
				"unit file /etc/systemd/system/app.service is absent",
				"unit app.service is not a unit systemd has a file for, declared enabled",
				"unit app.service is inactive, declared running",
			}},
		{"changed unit file", wire.ServiceSpec{UnitFile: &body}, state{file: []byte("[Service]\nExecStart=/bin/false\n")},
			[]string{"unit file /etc/systemd/system/app.service differs from the declared content"}},
		{"unit file as declared but not loaded", wire.ServiceSpec{UnitFile: &body}, state{file: []byte(body), stale: true},
			[]string{"systemd has not loaded unit file /etc/systemd/system/app.service as it is on disk (a daemon-reload is due)"}},
		{"enabled, declared disabled", wire.ServiceSpec{Enabled: ptr(false)}, state{enabled: "enabled"},
			[]string{"unit app.service is enabled, declared disabled"}},
		{"static is not enabled", wire.ServiceSpec{Enabled: ptr(true)}, state{enabled: "static"},
			[]string{"unit app.service is static, declared enabled"}},
		{"enabled only until the next boot is not enabled", wire.ServiceSpec{Enabled: ptr(true)}, state{enabled: "enabled-runtime"},
			[]string{"unit app.service is enabled-runtime, declared enabled"}},
		{"failed counts as stopped", wire.ServiceSpec{State: "stopped"}, state{active: "failed"}, nil},
		{"failed is not running", wire.ServiceSpec{State: "running"}, state{active: "failed"},
			[]string{"unit app.service is failed, declared running"}},
		{"still stopping is not stopped", wire.ServiceSpec{State: "stopped"}, state{active: "deactivating"},
			[]string{"unit app.service is deactivating, declared stopped"}},
		{"reloading is running", wire.ServiceSpec{State: "running"}, state{active: "reloading"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := differences(un(tc.spec), tc.s)
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}

func TestWriteFileReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "app.service")
	for _, body := range []string{"first\n", "second\n"} {
		if err := writeFile(p, []byte(body)); err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(p)
		if err != nil || string(got) != body {
			t.Fatalf("read %q %v, want %q", got, err, body)
		}
	}
	fi, _ := os.Stat(p)
	if fi.Mode().Perm() != 0o644 {
		t.Errorf("mode %v, want 0644", fi.Mode().Perm())
	}
	left, _ := os.ReadDir(filepath.Dir(p))
	if len(left) != 1 {
		t.Errorf("the directory holds %d entries, want the unit file alone (no temp file left)", len(left))
	}
}
