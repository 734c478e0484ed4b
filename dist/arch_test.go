package dist

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"debug/buildinfo"
	"debug/elf"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// The node is packaged for every architecture of a mixed fleet (issue 28, section 4): each .deb
// and tarball is named with Debian's word for its architecture and holds binaries built for it,
// the same bytes in both; each tarball's install.sh knows its architecture and refuses a machine
// of another, by name. All of it from the one `make package` the suite shares.

func TestEveryArchitectureGetsADebAndATarballOfItsOwnBinaries(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	for _, p := range a.nodes {
		t.Run(p.name, func(t *testing.T) {
			tree := t.TempDir()
			run(t, "dpkg-deb", "-x", p.deb, tree)
			inTarball := tarballFiles(t, p.tarball)
			for _, tc := range []struct{ inDeb, inTarball string }{
				{"usr/bin/mesh-launcher", "mesh-launcher"},
				{"usr/share/mesh-host/mesh-host", "mesh-host"},
			} {
				b, err := os.ReadFile(filepath.Join(tree, tc.inDeb))
				if err != nil {
					t.Fatal(err)
				}
				wantBuiltFor(t, p.name+".deb's /"+tc.inDeb, b, p.nodeArch)
				if tb, ok := inTarball[p.topDir+"/"+tc.inTarball]; !ok {
					t.Errorf("the tarball has no %s", tc.inTarball)
				} else if !bytes.Equal(tb, b) {
					t.Errorf("the tarball's %s differs from the .deb's /%s: both are one build", tc.inTarball, tc.inDeb)
				}
			}
		})
	}
}

// wantBuiltFor fails unless the binary b is a static Linux executable for arch: its ELF machine,
// and Go's own record of the build (GOARCH, GOARM=7 for arm, no cgo).
func wantBuiltFor(t *testing.T, what string, b []byte, arch nodeArch) {
	t.Helper()
	f, err := elf.NewFile(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s is no ELF file: %v", what, err)
		return
	}
	defer f.Close()
	if f.Machine != arch.machine || f.Type != elf.ET_EXEC || f.OSABI != elf.ELFOSABI_NONE && f.OSABI != elf.ELFOSABI_LINUX {
		t.Errorf("%s is an ELF %v %v for %v, want an executable for %v", what, f.Type, f.OSABI, f.Machine, arch.machine)
	}
	info, err := buildinfo.Read(bytes.NewReader(b))
	if err != nil {
		t.Errorf("%s has no Go build information: %v", what, err)
		return
	}
	want := map[string]string{"GOOS": "linux", "GOARCH": arch.goarch, "CGO_ENABLED": "0"}
	if arch.goarch == "arm" {
		want["GOARM"] = "7" // Debian's armhf: ARMv7, hard float
	}
	got := map[string]string{}
	for _, s := range info.Settings {
		got[s.Key] = s.Value
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s was built with %s=%q, want %q", what, k, got[k], v)
		}
	}
}

// tarballFiles reads a .tar.gz's regular files into memory, by name.
func tarballFiles(t *testing.T, path string) map[string][]byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	files := map[string][]byte{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if h.Typeflag == tar.TypeReg {
			b, err := io.ReadAll(tr)
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			files[h.Name] = b
		}
	}
}

// Each tarball's install.sh is dist/tarball/install.sh with its architecture stamped in: the
// same script, so the shellcheck of the source covers every copy.
func TestEachTarballsInstallShIsTheSourceStampedWithItsArchitecture(t *testing.T) {
	a := built(t)
	source, err := os.ReadFile(filepath.Join(a.repo, "dist/tarball/install.sh"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range a.nodes {
		t.Run(p.name, func(t *testing.T) {
			got := string(tarballFiles(t, p.tarball)[p.topDir+"/install.sh"])
			want := strings.Replace(string(source), "\ntarball_arch=unstamped\n", "\ntarball_arch="+p.name+"\n", 1)
			if want == string(source) {
				t.Fatal("dist/tarball/install.sh has no line tarball_arch=unstamped for make package to stamp")
			}
			if got != want {
				t.Errorf("the %s tarball's install.sh is not dist/tarball/install.sh with tarball_arch=%s:\n%s", p.name, p.name, got)
			}
		})
	}
}

// install.sh compares the machine's own word for itself (uname -m) with its tarball's
// architecture before it writes anything: a machine of another is refused naming both, one no
// tarball is built for names what there is, and a matching one installs. The machine is a fake
// uname on install.sh's PATH, and one case is this machine's own.
func TestInstallShRefusesAMachineOfAnotherArchitectureByName(t *testing.T) {
	a := built(t)
	byName := map[string]nodePackage{}
	for _, p := range a.nodes {
		byName[p.name] = p
	}
	other := "arm64" // a tarball not for this machine, on this machine
	if runtime.GOARCH == "arm64" {
		other = "amd64"
	}
	for _, tc := range []struct {
		name     string
		tarball  string // its architecture
		machine  string // what uname -m says; "" for this machine's uname
		args     []string
		wantSays string // on stderr when refused; "" for an install that goes ahead
	}{
		{name: "an arm64 tarball on an x86_64 machine", tarball: "arm64", machine: "x86_64",
			wantSays: "install.sh: this tarball is for arm64; this machine is x86_64 (amd64): install the amd64 tarball"},
		{name: "an amd64 tarball on an aarch64 machine", tarball: "amd64", machine: "aarch64",
			wantSays: "this tarball is for amd64; this machine is aarch64 (arm64): install the arm64 tarball"},
		{name: "an armhf tarball on an aarch64 machine", tarball: "armhf", machine: "aarch64",
			wantSays: "this tarball is for armhf; this machine is aarch64 (arm64): install the arm64 tarball"},
		{name: "an arm64 tarball on a 32-bit arm machine", tarball: "arm64", machine: "armv7l",
			wantSays: "this tarball is for arm64; this machine is armv7l (armhf): install the armhf tarball"},
		{name: "an armhf tarball on an ARMv6 machine", tarball: "armhf", machine: "armv6l",
			wantSays: "this tarball is for armhf; this machine is armv6l, for which mesh-host is not built (amd64, arm64, armhf)"},
		{name: "a tarball on a machine nothing is built for", tarball: "amd64", machine: "riscv64",
			wantSays: "this machine is riscv64, for which mesh-host is not built"},
		{name: "another architecture's tarball on this machine", tarball: other,
			wantSays: "install.sh: this tarball is for " + other + "; this machine is "},
		{name: "an amd64 tarball on an x86_64 machine installs", tarball: "amd64", machine: "x86_64"},
		{name: "an arm64 tarball on an aarch64 machine installs", tarball: "arm64", machine: "aarch64"},
		{name: "an armhf tarball on an armv7l machine installs", tarball: "armhf", machine: "armv7l"},
		{name: "an armhf tarball on an ARMv8 kernel running 32-bit installs", tarball: "armhf", machine: "armv8l"},
		{name: "uninstall works on any machine", tarball: "arm64", machine: "x86_64", args: []string{"--uninstall"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := byName[tc.tarball]
			dir := unpackTarball(t, p.tarball, p.topDir)
			calls := stubLauncher(t, dir)
			path := toolsPath(t, false)
			if tc.machine != "" {
				fakeUname(t, path, tc.machine)
			}
			root := t.TempDir()
			r := installSh(t, dir, dir, path, nil, append([]string{"--root", root}, tc.args...)...)
			if tc.wantSays == "" {
				if r.code != 0 {
					t.Fatalf("install.sh exited %d\n%s%s", r.code, r.stdout, r.stderr)
				}
				if _, err := os.Stat(calls); len(tc.args) == 0 && err != nil {
					t.Errorf("install.sh did not run the launcher's install: %v", err)
				}
				return
			}
			if r.code != 1 || !strings.Contains(r.stderr, tc.wantSays) {
				t.Errorf("install.sh exited %d saying %q; want 1 saying %q", r.code, r.stderr, tc.wantSays)
			}
			if entries, _ := os.ReadDir(root); len(entries) > 0 {
				t.Errorf("install.sh wrote under the root although it refused: %v", entries)
			}
			if _, err := os.Stat(calls); err == nil {
				t.Error("install.sh ran the launcher although it refused")
			}
		})
	}
}

// fakeUname replaces uname in the tools directory path with a script that says machine to -m.
func fakeUname(t *testing.T, path, machine string) {
	t.Helper()
	uname := filepath.Join(path, "uname")
	if err := os.Remove(uname); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\n[ \"$1\" = -m ] || exit 2\necho '" + machine + "'\n"
	if err := os.WriteFile(uname, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}
