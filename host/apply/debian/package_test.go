package debian

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/wire"
)

// These tests never run dpkg or apt on this machine: the programs are scripts in a temp dir that
// answer as dpkg would and note how they were called. Installing for real is proved in the
// real-systemd lab's nodes (lab/systemd, appliers_test.go).

func resource(id string, spec wire.PackageSpec) wire.Resource {
	raw, _ := json.Marshal(spec)
	return wire.Resource{Type: "package", ID: id, Spec: raw, Parsed: &spec}
}

func TestParseStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  string
		want status
		err  bool
	}{
		{"installed at a version", "installed 1.2.3-1", status{"installed", "1.2.3-1"}, false},
		{"a version with an epoch", "installed 1:2.38.1-5+deb12u1\n", status{"installed", "1:2.38.1-5+deb12u1"}, false},
		{"removed, its configuration kept", "config-files 0.9", status{"config-files", "0.9"}, false},
		{"known but never installed: no version", "not-installed ", status{"not-installed", ""}, false},
		{"nothing at all", "", status{}, true},
		{"two packages (a pattern matched several)", "installed 1\ninstalled 2", status{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseStatus([]byte(tc.out))
			if (err != nil) != tc.err || got != tc.want {
				t.Errorf("parseStatus(%q) = %+v, %v; want %+v, error %v", tc.out, got, err, tc.want, tc.err)
			}
		})
	}
}

func TestDifferences(t *testing.T) {
	for _, tc := range []struct {
		name    string
		version string
		s       status
		want    string
	}{
		{"absent: dpkg never heard of it", "", status{}, "package hello is absent"},
		{"absent: removed and purged", "", status{"not-installed", ""}, "package hello is absent"},
		{"only its configuration left", "", status{"config-files", "1.0"}, "package hello is config-files, declared installed"},
		{"half installed by a failed dpkg run", "", status{"half-configured", "1.0"}, "package hello is half-configured, declared installed"},
		{"installed at any version", "", status{"installed", "1.0"}, ""},
		{"installed at the declared version", "1.0", status{"installed", "1.0"}, ""},
		{"installed at another version", "2.0", status{"installed", "1.0"}, "package hello is installed at 1.0, declared 2.0"},
		{"triggers pending is installed", "1.0", status{"triggers-pending", "1.0"}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := strings.Join(differences(pkg{name: "hello", spec: &wire.PackageSpec{Version: tc.version}}, tc.s), "\n")
			if got != tc.want {
				t.Errorf("differences = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	for _, tc := range []struct {
		name string
		r    wire.Resource
		want string // the package name, or a part of the error
		err  bool
	}{
		{"the id is the name by default", resource("hello", wire.PackageSpec{}), "hello", false},
		{"name overrides the id", resource("web", wire.PackageSpec{Name: "nginx-light"}), "nginx-light", false},
		{"a name with an architecture", resource("libc6:amd64", wire.PackageSpec{}), "libc6:amd64", false},
		// Seed 000: the host may apply its own package (its postinst never stops the host; decision 0017).
		{"the installation's own package", resource("mesh-host", wire.PackageSpec{Source: "sha256:" + strings.Repeat("0", 64)}), "mesh-host", false},
		{"the installation's own package for an architecture", resource("x", wire.PackageSpec{Name: "mesh-host:amd64"}), "mesh-host:amd64", false},
		{"a name that would be an option", resource("x", wire.PackageSpec{Name: "--force-all"}), "not a Debian package name", true},
		{"a name with an apt version in it", resource("hello=1.0", wire.PackageSpec{}), "not a Debian package name", true},
		{"upper case", resource("Hello", wire.PackageSpec{}), "not a Debian package name", true},
		{"a version with a space", resource("hello", wire.PackageSpec{Version: "1.0 -y"}), "is not a Debian version", true},
		{"a source that is not a digest", resource("hello", wire.PackageSpec{Source: "http://x/hello.deb"}), "is not a digest", true},
		{"a spec of another kind", wire.Resource{Type: "package", ID: "hello", Parsed: &wire.ServiceSpec{}}, "not a package spec", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := resolve(tc.r)
			if tc.err {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("resolve: %v, want an error saying %q", err, tc.want)
				}
				return
			}
			if err != nil || got.name != tc.want {
				t.Fatalf("resolve: %q %v, want %q", got.name, err, tc.want)
			}
		})
	}
}

func TestControl(t *testing.T) {
	name, version, arch := control([]byte("Package: hello\nVersion: 1:1.0-2\nArchitecture: amd64\n"))
	if name != "hello" || version != "1:1.0-2" || arch != "amd64" {
		t.Errorf("control = %q %q %q", name, version, arch)
	}
}

func TestTailKeepsTheLastKiB(t *testing.T) {
	long := strings.Repeat("é", 2000) + "E: the reason"
	got := tail([]byte(long))
	if len(got) > outputTail+len("\n…") || !strings.HasSuffix(got, "E: the reason") || !strings.HasPrefix(got, "\n…") {
		t.Errorf("tail: %d bytes, prefix %q, want at most a KiB ending with the reason", len(got), got[:8])
	}
	if !strings.HasPrefix(got[len("\n…"):], "é") {
		t.Errorf("tail cut a character in two: %q", got[:8])
	}
	if tail([]byte(" \n")) != "" {
		t.Errorf("tail of nothing is not empty")
	}
}

func TestRemoveNeverUninstalls(t *testing.T) {
	p := fakes(t, "installed 1.0", "")
	got, err := p.Remove(context.Background(), apply.Owned{Type: "package", ID: "hello", Created: true})
	if err != nil || got != Forgotten {
		t.Errorf("Remove: %q %v, want %q", got, err, Forgotten)
	}
	if calls := p.calls(t); calls != "" {
		t.Errorf("Remove ran:\n%s", calls)
	}
}

// blobs is an in-memory blob store (host/blobs is the real one, tested there).
type blobs map[string][]byte

func (b blobs) Open(_ context.Context, digest string) (io.ReadCloser, error) {
	body, ok := b[digest]
	if !ok {
		return nil, fmt.Errorf("blob %s: not found", digest)
	}
	return io.NopCloser(bytes.NewReader(body)), nil
}

func digestOf(b []byte) string {
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// fakePackages is Packages with its programs replaced by scripts that log their arguments.
type fakePackages struct {
	*Packages
	log string
}

// fakes makes the scripts: dpkg-query answers status (exit 1, "no packages found", when it is
// empty), dpkg-deb -f answers fields, dpkg and apt-get succeed.
func fakes(t *testing.T, status, fields string) fakePackages {
	t.Helper()
	dir := t.TempDir()
	log := filepath.Join(dir, "calls")
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		s := "#!/bin/sh\necho \"" + name + " $*\" >> " + log + "\n" + body
		if err := os.WriteFile(p, []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	query := "printf '%s' '" + status + "'\n"
	if status == "" {
		query = "echo 'dpkg-query: no packages found matching hello' >&2; exit 1\n"
	}
	return fakePackages{
		Packages: &Packages{
			Blobs:     blobs{},
			DpkgQuery: script("dpkg-query", query),
			DpkgDeb:   script("dpkg-deb", "printf '%s' '"+fields+"'\n"),
			Dpkg:      script("dpkg", ""),
			AptGet:    script("apt-get", ""),
			TempDir:   dir,
		},
		log: log,
	}
}

func (f fakePackages) calls(t *testing.T) string {
	b, err := os.ReadFile(f.log)
	if os.IsNotExist(err) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestApply(t *testing.T) {
	deb := []byte("!<arch>\nnot really a deb; dpkg-deb is a script here\n")
	lie := "sha256:" + strings.Repeat("ab", 32) // a store that answers it with deb's bytes lies
	for _, tc := range []struct {
		name        string
		status      string // dpkg-query's answer; "" is a package dpkg never heard of
		fields      string // dpkg-deb -f's answer
		spec        wire.PackageSpec
		wantCreated bool
		wantErr     string
		wantCalls   []string // prefixes of the calls, in order, after dpkg-query
	}{
		{"installed at the declared version: nothing runs", "installed 1.0", "", wire.PackageSpec{Version: "1.0"}, false, "", nil},
		{"absent, from the repositories", "", "", wire.PackageSpec{}, true, "",
			[]string{"apt-get install -y --no-install-recommends --allow-downgrades -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold hello"}},
		{"at another version, from the repositories at the declared one", "installed 1.0", "", wire.PackageSpec{Version: "2.0"}, false, "",
			[]string{"apt-get install -y --no-install-recommends --allow-downgrades -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold hello=2.0"}},
		{"absent, from a .deb blob", "", "Package: hello\nVersion: 1.0\n", wire.PackageSpec{Version: "1.0", Source: digestOf(deb)}, true, "",
			[]string{"dpkg-deb -f ", "dpkg --force-confdef --force-confold -i "}},
		{"a .deb of another package is refused", "", "Package: evil\nVersion: 1.0\n", wire.PackageSpec{Source: digestOf(deb)}, false,
			`is the package "evil", not hello: refused`, []string{"dpkg-deb -f "}},
		{"an architecture-qualified name takes its package's .deb", "", "Package: hello\nVersion: 1.0\nArchitecture: amd64\n", wire.PackageSpec{Name: "hello:amd64", Source: digestOf(deb)}, true, "",
			[]string{"dpkg-deb -f ", "dpkg --force-confdef --force-confold -i "}},
		{"a .deb for another architecture is refused", "", "Package: hello\nVersion: 1.0\nArchitecture: arm64\n", wire.PackageSpec{Name: "hello:amd64", Source: digestOf(deb)}, false,
			`is for architecture "arm64", not amd64: refused`, []string{"dpkg-deb -f "}},
		{"a .deb of another version is refused", "", "Package: hello\nVersion: 0.9\n", wire.PackageSpec{Version: "1.0", Source: digestOf(deb)}, false,
			`is version "0.9", declared 1.0: refused`, []string{"dpkg-deb -f "}},
		{"a blob that is not in the store", "", "", wire.PackageSpec{Source: digestOf([]byte("other"))}, false, "not found", nil},
		{"a blob that does not match its digest is refused before dpkg reads it", "", "Package: hello\nVersion: 1.0\n", wire.PackageSpec{Source: lie}, false,
			"does not match " + lie + ": refused", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fakes(t, tc.status, tc.fields)
			f.Blobs = blobs{digestOf(deb): deb, lie: deb}
			created, err := f.Apply(context.Background(), resource("hello", tc.spec))
			if tc.wantErr == "" && err != nil || tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)) {
				t.Fatalf("Apply: %v, want error %q", err, tc.wantErr)
			}
			if err == nil && created != tc.wantCreated {
				t.Errorf("created %v, want %v", created, tc.wantCreated)
			}
			calls := strings.Split(f.calls(t), "\n")
			if !strings.HasPrefix(calls[0], "dpkg-query -W -f ${db:Status-Status} ${Version} hello") {
				t.Fatalf("first call %q, want dpkg-query of hello", calls[0])
			}
			calls = calls[1:]
			if len(calls) != len(tc.wantCalls) {
				t.Fatalf("calls after dpkg-query:\n%s\nwant %d: %q", strings.Join(calls, "\n"), len(tc.wantCalls), tc.wantCalls)
			}
			for i, c := range calls {
				if !strings.HasPrefix(c, tc.wantCalls[i]) {
					t.Errorf("call %d: %q, want it to begin %q", i, c, tc.wantCalls[i])
				}
			}
			if left, _ := filepath.Glob(filepath.Join(f.TempDir, "*.deb")); len(left) > 0 {
				t.Errorf("temp .deb left behind: %v", left)
			}
		})
	}
}

func TestApplyErrorCarriesTheEndOfTheOutput(t *testing.T) {
	f := fakes(t, "", "")
	script := "#!/bin/sh\nfor i in $(seq 1 500); do echo \"Reading line $i\"; done\necho 'E: Unable to locate package hello' >&2\nexit 100\n"
	if err := os.WriteFile(f.AptGet, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err := f.Apply(context.Background(), resource("hello", wire.PackageSpec{}))
	if err == nil || !strings.HasSuffix(err.Error(), "E: Unable to locate package hello") || strings.Contains(err.Error(), "Reading line 1\n") {
		t.Fatalf("Apply: %v, want the last of apt-get's output, ending with its error", err)
	}
	if len(err.Error()) > 2*outputTail {
		t.Errorf("the error is %d bytes: not bounded", len(err.Error()))
	}
}
