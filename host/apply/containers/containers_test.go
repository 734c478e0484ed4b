package containers

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
)

const (
	img  = "registry.example:5000/team/app@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	img2 = "registry.example:5000/team/app@sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func resource(id string, s wire.ContainerSpec) wire.Resource {
	raw, _ := json.Marshal(s)
	return wire.Resource{Type: "container", ID: id, Spec: raw, Parsed: &s}
}

func webSpec() wire.ContainerSpec {
	return wire.ContainerSpec{
		Image:   img,
		Command: []string{"serve", "--port=80"},
		Env:     map[string]string{"B": "2", "A": "1"},
		Ports:   []string{"8080:80"},
		Volumes: []string{"/srv/web:/data:ro"},
	}
}

// withImages is a fake runtime's world holding these images and no container.
func withImages(refs ...string) fakeState {
	st := fakeState{Images: map[string]string{}}
	for i, r := range refs {
		st.Images[r] = "sha256:" + strings.Repeat(string(rune('a'+i)), 64)
	}
	return st
}

func docker(f *fake) apply.Applier {
	return Container(Options{Runtime: "docker", Commands: map[string]string{"docker": f.exe}})
}

func mustApply(t *testing.T, a apply.Applier, r wire.Resource) bool {
	t.Helper()
	created, err := a.Apply(context.Background(), r)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	return created
}

func mustInspect(t *testing.T, a apply.Applier, r wire.Resource) []string {
	t.Helper()
	diff, err := a.Inspect(context.Background(), r)
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	return diff
}

func TestApplyCreatesTheContainerLabelledWithItsDeclaration(t *testing.T) {
	t.Parallel()
	f := newFake(t, withImages(img))
	a := docker(f)
	r := resource("web", webSpec())
	if diff := mustInspect(t, a, r); !slices.Equal(diff, []string{"absent"}) {
		t.Fatalf("Inspect before = %q, want [absent]", diff)
	}
	f.reset()
	if !mustApply(t, a, r) {
		t.Error("Apply of a container that did not exist said created=false")
	}
	digest := DeclarationDigest("web", webSpec())
	want := [][]string{
		{"container", "inspect", "--format", "{{json .}}", "web"},
		{"image", "inspect", "--format", "{{.Id}}", img},
		{"create", "--name=web", "--label=io.mesh-host.declaration=" + digest, "--label=io.mesh-host.managed=true",
			"--restart=unless-stopped", "--env=A=1", "--env=B=2", "--publish=8080:80", "--volume=/srv/web:/data:ro",
			img, "serve", "--port=80"},
		{"start", "web"},
	}
	if got := f.calls(); !slices.EqualFunc(got, want, slices.Equal) {
		t.Fatalf("calls:\n got %q\nwant %q", got, want)
	}
	if diff := mustInspect(t, a, r); len(diff) != 0 {
		t.Fatalf("read-back = %q, want no difference", diff)
	}
}

func TestSecondApplyChangesNothing(t *testing.T) {
	t.Parallel()
	f := newFake(t, withImages(img))
	a := docker(f)
	r := resource("web", webSpec())
	mustApply(t, a, r)
	f.reset()
	if mustApply(t, a, r) {
		t.Error("second Apply said created=true")
	}
	if got := f.verbs(); !slices.Equal(got, []string{"container inspect"}) {
		t.Fatalf("second Apply ran %q, want only the inspect", got)
	}
}

func TestMissingImageIsPulledByDigest(t *testing.T) {
	t.Parallel()
	f := newFake(t, withImages())
	a := docker(f)
	mustApply(t, a, resource("web", webSpec()))
	var pulls [][]string
	for _, c := range f.calls() {
		if c[0] == "pull" {
			pulls = append(pulls, c)
		}
	}
	if want := [][]string{{"pull", img}}; !slices.EqualFunc(pulls, want, slices.Equal) {
		t.Fatalf("pulls = %q, want %q", pulls, want)
	}
}

func TestChangedSpecReplacesTheContainer(t *testing.T) {
	t.Parallel()
	changes := []struct {
		name   string
		change func(*wire.ContainerSpec)
	}{
		{"a new image", func(s *wire.ContainerSpec) { s.Image = img2 }},
		{"an env value", func(s *wire.ContainerSpec) { s.Env["A"] = "changed" }},
		{"the command", func(s *wire.ContainerSpec) { s.Command = []string{"serve"} }},
		{"a port", func(s *wire.ContainerSpec) { s.Ports = []string{"9090:80"} }},
		{"the restart policy", func(s *wire.ContainerSpec) { s.Restart = "always" }},
	}
	for _, tt := range changes {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, withImages(img, img2))
			a := docker(f)
			mustApply(t, a, resource("web", webSpec()))
			s := webSpec()
			tt.change(&s)
			r := resource("web", s)
			diff := mustInspect(t, a, r)
			want := "declared differently (label " + DeclarationDigest("web", webSpec()) + ", declared " + DeclarationDigest("web", s) + ")"
			if !slices.Equal(diff, []string{want}) {
				t.Fatalf("Inspect = %q, want [%q]", diff, want)
			}
			f.reset()
			if mustApply(t, a, r) {
				t.Error("replacing a container the host made said created=true")
			}
			if got, want := f.verbs(), []string{"container inspect", "image inspect", "rm", "create", "start"}; !slices.Equal(got, want) {
				t.Fatalf("calls = %q, want %q", got, want)
			}
			if rm := f.calls()[2]; !slices.Equal(rm, []string{"rm", "-f", "web"}) {
				t.Fatalf("remove = %q", rm)
			}
			if diff := mustInspect(t, a, r); len(diff) != 0 {
				t.Fatalf("read-back = %q", diff)
			}
		})
	}
}

func TestRuntimeNormalisationIsNotDrift(t *testing.T) {
	t.Parallel()
	for _, list := range []bool{false, true} {
		name := "docker answers with an object"
		if list {
			name = "podman answers with a list"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			st := withImages(img)
			st.List = list
			f := newFake(t, st)
			a := docker(f)
			r := resource("web", webSpec())
			mustApply(t, a, r)
			c := f.state().Containers["web"]
			// The fake wrote what a runtime would: not the declared strings.
			if c.Config.Image == img || slices.Equal(c.Config.Env, []string{"A=1", "B=2"}) {
				t.Fatalf("the fake did not normalise: image %q env %q", c.Config.Image, c.Config.Env)
			}
			if diff := mustInspect(t, a, r); len(diff) != 0 {
				t.Fatalf("Inspect = %q, want no difference", diff)
			}
		})
	}
}

func TestStoppedContainerIsStarted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		restart  string
		status   string
		exitCode int
		want     []string // Inspect's difference; none means left stopped
	}{
		{"stopped under the default policy is started", "", "exited", 137, []string{"not running (exited, exit code 137)"}},
		{"stopped under always is started", "always", "exited", 0, []string{"not running (exited, exit code 0)"}},
		{"on-failure after a failure is started", "on-failure:3", "exited", 1, []string{"not running (exited, exit code 1)"}},
		{"on-failure after success is left", "on-failure", "exited", 0, nil},
		{"restart no after it ran is left", "no", "exited", 0, nil},
		{"restart no, never started, is started", "no", "created", 0, []string{"not running (created, never started)"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, withImages(img))
			a := docker(f)
			s := webSpec()
			s.Restart = tt.restart
			r := resource("web", s)
			mustApply(t, a, r)
			st := f.state()
			c := st.Containers["web"]
			c.State.Running, c.State.Status, c.State.ExitCode = false, tt.status, tt.exitCode
			f.set(st)
			if diff := mustInspect(t, a, r); !slices.Equal(diff, tt.want) {
				t.Fatalf("Inspect = %q, want %q", diff, tt.want)
			}
			f.reset()
			if mustApply(t, a, r) {
				t.Error("starting said created=true")
			}
			wantVerbs := []string{"container inspect"}
			if tt.want != nil {
				wantVerbs = append(wantVerbs, "start")
			}
			if got := f.verbs(); !slices.Equal(got, wantVerbs) {
				t.Fatalf("calls = %q, want %q", got, wantVerbs)
			}
			if diff := mustInspect(t, a, r); len(diff) != 0 {
				t.Fatalf("read-back = %q", diff)
			}
		})
	}
}

// Just after a container stops, podman may still be clearing the old run away, and a start then
// fails (seen in CI: "runc create failed: container with given ID already exists"). Starting a
// stopped container again rides that out; a start that keeps failing fails the apply.
func TestStoppedContainerStartIsTriedAgainBeforeItFails(t *testing.T) {
	t.Parallel()
	const busy = "Error: OCI runtime error: runc: runc create failed: container with given ID already exists"
	tests := []struct {
		name   string
		fails  int // how many starts fail
		starts int // how many are tried
		ok     bool
	}{
		{"a start that fails twice then works", 2, 3, true},
		{"a start that keeps failing", 99, startTries, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, withImages(img))
			a := docker(f)
			r := resource("web", webSpec())
			mustApply(t, a, r)
			st := f.state()
			c := st.Containers["web"]
			c.State.Running, c.State.Status, c.State.ExitCode = false, "exited", 137
			st.Fail, st.FailTimes = map[string]string{"start": busy}, map[string]int{"start": tt.fails}
			f.set(st)
			f.reset()
			_, err := a.Apply(context.Background(), r)
			if tt.ok && err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if !tt.ok && (err == nil || !strings.Contains(err.Error(), "container with given ID already exists")) {
				t.Fatalf("Apply error %v, want the last start's failure", err)
			}
			want := []string{"container inspect"}
			for range tt.starts {
				want = append(want, "start")
			}
			if got := f.verbs(); !slices.Equal(got, want) {
				t.Fatalf("calls = %q, want %q", got, want)
			}
			if running := f.state().Containers["web"].State.Running; running != tt.ok {
				t.Fatalf("running after Apply = %v, want %v", running, tt.ok)
			}
		})
	}
}

func TestContainerTheHostDidNotMakeIsLeftAlone(t *testing.T) {
	t.Parallel()
	st := withImages(img)
	other := &fakeContainer{Name: "/web"}
	other.Config.Labels = map[string]string{"maintainer": "someone"}
	other.State.Status, other.State.Running = "running", true
	st.Containers = map[string]*fakeContainer{"web": other}
	f := newFake(t, st)
	a := docker(f)
	r := resource("web", webSpec())
	diff := mustInspect(t, a, r)
	if len(diff) != 1 || !strings.Contains(diff[0], "exists that the host did not make") {
		t.Fatalf("Inspect = %q", diff)
	}
	f.reset()
	_, err := a.Apply(context.Background(), r)
	if err == nil || !strings.Contains(err.Error(), "the host leaves it") {
		t.Fatalf("Apply error = %v, want a refusal to replace it", err)
	}
	if got := f.verbs(); !slices.Equal(got, []string{"container inspect"}) {
		t.Fatalf("calls = %q: it touched a container it did not make", got)
	}
	got, err := a.Remove(context.Background(), apply.Owned{Type: "container", ID: "web", Spec: r.Spec, Parsed: r.Parsed, Created: true})
	if err != nil || !strings.HasPrefix(got, "forgotten: ") {
		t.Fatalf("Remove = %q, %v; want forgotten", got, err)
	}
	if _, ok := f.state().Containers["web"]; !ok {
		t.Fatal("Remove removed a container the host did not make")
	}
}

func TestInspectIgnoresAContainerFoundByIDPrefix(t *testing.T) {
	t.Parallel()
	// `inspect abc` also finds a container whose ID begins with abc: not the one named abc.
	st := withImages(img)
	c := &fakeContainer{Name: "/other"}
	c.Config.Labels = map[string]string{LabelManaged: "true", LabelDeclaration: "sha256:x"}
	st.Containers = map[string]*fakeContainer{"abc": c}
	f := newFake(t, st)
	if diff := mustInspect(t, docker(f), resource("abc", webSpec())); !slices.Equal(diff, []string{"absent"}) {
		t.Fatalf("Inspect = %q, want [absent]", diff)
	}
}

func TestRemove(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		created bool
		present bool
		want    string
		rm      bool
	}{
		{"one the host created is removed", true, true, "removed", true},
		{"one that existed before is forgotten", false, true, "forgotten: container web existed before the host applied it", false},
		{"one already gone is reported removed", true, false, "removed (it was already gone)", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, withImages(img))
			a := docker(f)
			r := resource("web", webSpec())
			if tt.present {
				mustApply(t, a, r)
			}
			f.reset()
			got, err := a.Remove(context.Background(), apply.Owned{Type: "container", ID: "web", Spec: r.Spec, Parsed: r.Parsed, Created: tt.created})
			if err != nil || got != tt.want {
				t.Fatalf("Remove = %q, %v; want %q", got, err, tt.want)
			}
			if rm := slices.Contains(f.verbs(), "rm"); rm != tt.rm {
				t.Fatalf("rm called = %v, want %v (calls %q)", rm, tt.rm, f.calls())
			}
			if _, ok := f.state().Containers["web"]; ok != (tt.present && !tt.rm) {
				t.Fatalf("container present after Remove = %v", ok)
			}
		})
	}
}

func TestRemoveDecodesTheLedgersSpec(t *testing.T) {
	t.Parallel()
	// The ledger may hand back a spec not parsed: it is decoded here.
	f := newFake(t, withImages(img))
	a := docker(f)
	r := resource("web", webSpec())
	mustApply(t, a, r)
	got, err := a.Remove(context.Background(), apply.Owned{Type: "container", ID: "web", Spec: r.Spec, Created: true})
	if err != nil || got != "removed" {
		t.Fatalf("Remove = %q, %v", got, err)
	}
}

func TestFailuresAreClearAndBounded(t *testing.T) {
	t.Parallel()
	huge := "Error response from daemon: " + strings.Repeat("x", 100_000) + " THE END"
	tests := []struct {
		name  string
		fail  map[string]string
		want  []string
		exist bool // the old container must still be there
	}{
		{
			name: "a daemon that cannot be reached is an error, not absent",
			fail: map[string]string{"container inspect": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock. Is the docker daemon running?"},
			want: []string{"docker container inspect failed (exit 1): Cannot connect to the Docker daemon"},
		},
		{
			name: "a create that fails quotes its output, cut",
			fail: map[string]string{"create": huge},
			want: []string{"docker create failed (exit 1): Error response from daemon: xxx", "…[cut ", "THE END"},
		},
		{
			name: "a pull that fails leaves the old container",
			fail: map[string]string{"pull": "manifest unknown"},
			want: []string{"docker pull failed (exit 1): manifest unknown"}, exist: true,
		},
		{
			name: "a start that fails says the container was created",
			fail: map[string]string{"start": "port is already allocated"},
			want: []string{"created, but it would not start: docker start failed (exit 1): port is already allocated"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, withImages(img))
			a := docker(f)
			mustApply(t, a, resource("web", webSpec()))
			st := f.state()
			st.Fail = tt.fail
			f.set(st)
			s := webSpec()
			s.Image = img2 // not present: a pull is needed, and the old one replaced
			_, err := a.Apply(context.Background(), resource("web", s))
			if err == nil {
				t.Fatal("Apply succeeded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\ndoes not contain %q", err, w)
				}
			}
			if n := len(err.Error()); n > 2*apply.OutputMax {
				t.Errorf("error is %d bytes, want at most %d", n, 2*apply.OutputMax)
			}
			if tt.exist {
				c := f.state().Containers["web"]
				if c == nil || c.Config.Labels[LabelDeclaration] != DeclarationDigest("web", webSpec()) {
					t.Fatal("the old container was not left as it was")
				}
			}
		})
	}
}

func TestRuntimeChoice(t *testing.T) {
	f := newFake(t, withImages(img))
	empty := t.TempDir()
	tests := []struct {
		name    string
		o       Options
		runtime string // the spec's
		path    string // PATH for the lookup, "" to keep it
		wantErr string // "" for success
	}{
		{name: "no runtime anywhere fails the step saying so", o: Options{Commands: map[string]string{"docker": f.exe}},
			wantErr: "no working container runtime on this machine (the profile found none)"},
		{name: "the spec's runtime is used when the profile found none", o: Options{Commands: map[string]string{"podman": f.exe}}, runtime: "podman"},
		{name: "the spec's runtime wins over the profile's", o: Options{Runtime: "docker", Commands: map[string]string{"podman": f.exe}}, runtime: "podman"},
		{name: "the profile's runtime is used when the spec names none", o: Options{Runtime: "podman", Commands: map[string]string{"podman": f.exe}}},
		{name: "an unknown runtime is refused", o: Options{Runtime: "docker"}, runtime: "lxc", wantErr: `container runtime "lxc": not docker or podman`},
		{name: "a runtime not on PATH says so", o: Options{Runtime: "podman"}, path: empty,
			wantErr: `container runtime podman: exec: "podman": executable file not found in $PATH`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.path != "" {
				t.Setenv("PATH", tt.path)
			}
			s := webSpec()
			s.Runtime = tt.runtime
			_, err := Container(tt.o).Inspect(context.Background(), resource("web", s))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("Inspect: %v", err)
			case tt.wantErr != "" && (err == nil || err.Error() != tt.wantErr):
				t.Fatalf("Inspect error = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func TestBadSpecIsRefusedBeforeAnythingRuns(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		id     string
		change func(*wire.ContainerSpec)
		want   string
	}{
		{"an image pinned by tag", "web", func(s *wire.ContainerSpec) { s.Image = "nginx:latest" }, `image "nginx:latest" must be pinned by digest`},
		{"an image with a short digest", "web", func(s *wire.ContainerSpec) { s.Image = "nginx@sha256:abc" }, `image "nginx@sha256:abc"`},
		{"a name that reads as a flag", "--privileged", func(*wire.ContainerSpec) {}, `name "--privileged"`},
		{"a declared name with a space", "web", func(s *wire.ContainerSpec) { s.Name = "a b" }, `name "a b"`},
		{"an unknown restart policy", "web", func(s *wire.ContainerSpec) { s.Restart = "sometimes" }, `restart "sometimes"`},
		{"an env key holding =", "web", func(s *wire.ContainerSpec) { s.Env = map[string]string{"A=B": "1"} }, `env key "A=B"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := newFake(t, withImages(img))
			s := webSpec()
			tt.change(&s)
			_, err := docker(f).Apply(context.Background(), resource(tt.id, s))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply error = %v, want it to contain %q", err, tt.want)
			}
			if calls := f.calls(); len(calls) != 0 {
				t.Fatalf("the runtime was called: %q", calls)
			}
		})
	}
}

func TestDeclarationDigest(t *testing.T) {
	t.Parallel()
	base := DeclarationDigest("web", webSpec())
	same := []struct {
		name string
		s    wire.ContainerSpec
		n    string
	}{
		{"the runtime is not part of it", func() wire.ContainerSpec { s := webSpec(); s.Runtime = "podman"; return s }(), "web"},
		{"the default restart policy named", func() wire.ContainerSpec { s := webSpec(); s.Restart = DefaultRestart; return s }(), "web"},
		{"the name given in the spec or by the id", func() wire.ContainerSpec { s := webSpec(); s.Name = "web"; return s }(), "web"},
		{"empty lists and none", func() wire.ContainerSpec { s := webSpec(); s.Ports = append(s.Ports[:0:0], s.Ports...); return s }(), "web"},
	}
	for _, tt := range same {
		if got := DeclarationDigest(tt.n, tt.s); got != base {
			t.Errorf("%s: digest %s, want %s", tt.name, got, base)
		}
	}
	if got := DeclarationDigest("api", webSpec()); got == base {
		t.Error("another name gives the same digest")
	}
	if !strings.HasPrefix(base, "sha256:") || len(base) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<64 hex>", base)
	}
}
