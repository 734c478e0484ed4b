package containers

// The fake runtime: a mock at the boundary that cannot exist here (this machine has a docker
// client but no engine). The test binary itself plays the runtime's client when started with
// MESH_FAKE_RUNTIME set to a state directory: it appends its argv to calls.jsonl and answers
// from state.json, normalising what it is given the way a real runtime does (the image named
// by its own spelling, environment reordered and added to), so drift that is not drift shows.

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestMain(m *testing.M) {
	if dir := os.Getenv("MESH_FAKE_RUNTIME"); dir != "" {
		os.Exit(fakeRuntime(dir, os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeState is the fake runtime's world.
type fakeState struct {
	Images     map[string]string         `json:"images"` // reference → image ID
	Containers map[string]*fakeContainer `json:"containers"`
	// Fail makes a verb ("pull", "create", "start", "container inspect", …) fail with this
	// message on standard error.
	Fail map[string]string `json:"fail,omitempty"`
	// FailTimes, where it names a verb of Fail, is how many more times that verb fails; it
	// then succeeds.
	FailTimes map[string]int `json:"fail_times,omitempty"`
	// List makes inspect answer as Podman does, with a list.
	List bool `json:"list,omitempty"`
	Next int  `json:"next"` // the last container ID given
}

// fakeContainer has the shape of `docker container inspect` output (the parts that matter).
type fakeContainer struct {
	ID     string `json:"Id"`
	Name   string `json:"Name"`
	Image  string `json:"Image"`
	Config struct {
		Image  string            `json:"Image"`
		Env    []string          `json:"Env"`
		Cmd    []string          `json:"Cmd"`
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
	State struct {
		Status   string `json:"Status"`
		Running  bool   `json:"Running"`
		ExitCode int    `json:"ExitCode"`
	} `json:"State"`
	HostConfig struct {
		RestartPolicy struct {
			Name string `json:"Name"`
		} `json:"RestartPolicy"`
		Binds        []string `json:"Binds"`
		PortBindings []string `json:"PortBindings"`
	} `json:"HostConfig"`
}

func fakeRuntime(dir string, args []string) int {
	log, err := os.OpenFile(filepath.Join(dir, "calls.jsonl"), os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake runtime:", err)
		return 2
	}
	line, _ := json.Marshal(args)
	fmt.Fprintf(log, "%s\n", line)
	log.Close()

	var st fakeState
	b, err := os.ReadFile(filepath.Join(dir, "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake runtime: state:", err)
		return 2
	}
	if st.Containers == nil {
		st.Containers = map[string]*fakeContainer{}
	}
	if st.Images == nil {
		st.Images = map[string]string{}
	}
	if len(args) == 0 {
		return 2
	}
	verb := args[0]
	if (verb == "container" || verb == "image") && len(args) > 1 {
		verb += " " + args[1]
	}
	if msg, ok := st.Fail[verb]; ok {
		n, counted := st.FailTimes[verb]
		if !counted || n > 0 {
			if counted {
				st.FailTimes[verb] = n - 1
				out, _ := json.Marshal(st)
				_ = os.WriteFile(filepath.Join(dir, "state.json"), out, 0o600)
			}
			fmt.Fprintln(os.Stderr, msg)
			return 1
		}
	}
	last := args[len(args)-1]
	code := 0
	switch verb {
	case "container inspect":
		c, ok := st.Containers[last]
		if !ok {
			if st.List {
				fmt.Println("[]")
				fmt.Fprintf(os.Stderr, "Error: inspecting object: no such container %s\n", last)
				return 125
			}
			fmt.Fprintf(os.Stderr, "Error: No such container: %s\n", last)
			return 1
		}
		var out []byte
		if st.List {
			out, _ = json.MarshalIndent([]*fakeContainer{c}, "", "     ")
		} else {
			out, _ = json.Marshal(c)
		}
		fmt.Printf("%s\n", out)
	case "image inspect":
		id, ok := st.Images[last]
		if !ok {
			fmt.Fprintf(os.Stderr, "Error: No such image: %s\n", last)
			return 1
		}
		fmt.Println(id)
	case "pull":
		st.Images[last] = fmt.Sprintf("sha256:%064d", len(st.Images)+1)
		fmt.Println("pulled", last)
	case "create":
		c := &fakeContainer{}
		c.Config.Labels = map[string]string{}
		i := 1
		for ; i < len(args) && strings.HasPrefix(args[i], "--"); i++ {
			k, v, _ := strings.Cut(args[i], "=")
			switch k {
			case "--name":
				c.Name = "/" + v
			case "--label":
				lk, lv, _ := strings.Cut(v, "=")
				c.Config.Labels[lk] = lv
			case "--restart":
				c.HostConfig.RestartPolicy.Name = v
			case "--env":
				c.Config.Env = append(c.Config.Env, v)
			case "--publish":
				c.HostConfig.PortBindings = append(c.HostConfig.PortBindings, v)
			case "--volume":
				c.HostConfig.Binds = append(c.HostConfig.Binds, v)
			default:
				fmt.Fprintf(os.Stderr, "fake runtime: unknown flag %s\n", args[i])
				return 125
			}
		}
		name := strings.TrimPrefix(c.Name, "/")
		if _, ok := st.Containers[name]; ok {
			fmt.Fprintf(os.Stderr, "Error: the container name %q is already in use\n", name)
			return 125
		}
		if i >= len(args) {
			fmt.Fprintln(os.Stderr, "fake runtime: no image")
			return 125
		}
		image := args[i]
		if _, ok := st.Images[image]; !ok {
			fmt.Fprintf(os.Stderr, "Error: No such image: %s\n", image)
			return 125
		}
		// A runtime's own spelling: the registry made explicit, the environment reversed and
		// given a PATH, the image recorded by ID.
		c.Config.Image = "docker.io/" + image
		c.Image = st.Images[image]
		slices.Reverse(c.Config.Env)
		c.Config.Env = append(c.Config.Env, "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin")
		c.Config.Cmd = args[i+1:]
		c.State.Status = "created"
		st.Next++
		c.ID = fmt.Sprintf("%064x", st.Next)
		st.Containers[name] = c
		fmt.Println(c.ID)
	case "start":
		c, ok := st.Containers[last]
		if !ok {
			fmt.Fprintf(os.Stderr, "Error: No such container: %s\n", last)
			return 1
		}
		c.State.Status, c.State.Running, c.State.ExitCode = "running", true, 0
		fmt.Println(last)
	case "rm":
		if _, ok := st.Containers[last]; !ok {
			fmt.Fprintf(os.Stderr, "Error: No such container: %s\n", last)
			return 1
		}
		delete(st.Containers, last)
		fmt.Println(last)
	default:
		fmt.Fprintf(os.Stderr, "fake runtime: unknown command %q\n", args)
		return 2
	}
	out, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(dir, "state.json"), out, 0o600); err != nil {
		fmt.Fprintln(os.Stderr, "fake runtime:", err)
		return 2
	}
	return code
}

// fake is a fake runtime set up for one test.
type fake struct {
	t   *testing.T
	dir string
	exe string // the client to name in Options.Commands
}

func newFake(t *testing.T, st fakeState) *fake {
	t.Helper()
	dir := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "runtime")
	script := fmt.Sprintf("#!/bin/sh\nMESH_FAKE_RUNTIME=%s exec %s \"$@\"\n", shellQuote(dir), shellQuote(self))
	if err := os.WriteFile(exe, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	f := &fake{t: t, dir: dir, exe: exe}
	f.set(st)
	return f
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func (f *fake) state() fakeState {
	f.t.Helper()
	var st fakeState
	b, err := os.ReadFile(filepath.Join(f.dir, "state.json"))
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return st
}

func (f *fake) set(st fakeState) {
	f.t.Helper()
	b, err := json.Marshal(st)
	if err != nil {
		f.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.dir, "state.json"), b, 0o600); err != nil {
		f.t.Fatal(err)
	}
}

// calls returns the argv of every call since the last reset.
func (f *fake) calls() [][]string {
	f.t.Helper()
	b, err := os.ReadFile(filepath.Join(f.dir, "calls.jsonl"))
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if line == "" {
			continue
		}
		var argv []string
		if err := json.Unmarshal([]byte(line), &argv); err != nil {
			f.t.Fatal(err)
		}
		out = append(out, argv)
	}
	return out
}

func (f *fake) reset() { _ = os.Remove(filepath.Join(f.dir, "calls.jsonl")) }

// verbs returns the first word (two for container/image) of every call since the last reset.
func (f *fake) verbs() []string {
	var out []string
	for _, argv := range f.calls() {
		v := argv[0]
		if (v == "container" || v == "image") && len(argv) > 1 {
			v += " " + argv[1]
		}
		out = append(out, v)
	}
	return out
}
