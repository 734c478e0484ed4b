package dist

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"debug/macho"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The release tool's package (issue 22, section 4; decision 0033): what `make package` writes for
// the release machine, checked the way an operator and Debian's tools would.

func TestReleaseDebHoldsTheToolItsUnitPagesCompletionsAndDocs(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	wantDebFiles(t, a.releaseDeb, map[string]string{
		"./usr/bin/mesh-release":                               "-rwxr-xr-x",
		"./lib/systemd/system/mesh-release.service":            "-rw-r--r--",
		"./usr/share/man/man1/mesh-release.1.gz":               "-rw-r--r--",
		"./usr/share/bash-completion/completions/mesh-release": "-rw-r--r--",
		"./usr/share/zsh/vendor-completions/_mesh-release":     "-rw-r--r--",
		"./usr/share/doc/mesh-release/copyright":               "-rw-r--r--",
		"./usr/share/doc/mesh-release/changelog.gz":            "-rw-r--r--",
		"./usr/share/lintian/overrides/mesh-release":           "-rw-r--r--",
	})
}

func TestReleaseDebControlNamesItAndDependsOnAdduserAlone(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	for _, tc := range []struct{ field, want string }{
		{"Package", "mesh-release"},
		{"Version", debVersion},
		{"Architecture", debArch()},
		// The postinst makes the system user with adduser (Debian policy 9.2.2); nothing else.
		{"Depends", "adduser"},
		{"Pre-Depends", ""},
	} {
		if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", a.releaseDeb, tc.field)); got != tc.want {
			t.Errorf("%s is %q, want %q", tc.field, got, tc.want)
		}
	}
}

func TestReleaseDebCarriesTheMaintainerScriptsTheUnitAndTheCopyrightFromDist(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	control := filepath.Join(t.TempDir(), "control")
	run(t, "dpkg-deb", "-e", a.releaseDeb, control)
	tree := t.TempDir()
	run(t, "dpkg-deb", "-x", a.releaseDeb, tree)
	for _, tc := range []struct {
		name, inDeb, source string
		mode                os.FileMode
	}{
		{"postinst", filepath.Join(control, "postinst"), "dist/release-deb/postinst", 0o755},
		{"prerm", filepath.Join(control, "prerm"), "dist/release-deb/prerm", 0o755},
		{"postrm", filepath.Join(control, "postrm"), "dist/release-deb/postrm", 0o755},
		{"unit", filepath.Join(tree, "lib/systemd/system/mesh-release.service"), "dist/mesh-release.service", 0o644},
		{"copyright", filepath.Join(tree, "usr/share/doc/mesh-release/copyright"), "dist/copyright", 0o644},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sameFile(t, tc.inDeb, filepath.Join(a.repo, tc.source), tc.mode)
		})
	}
	if got := strings.TrimSpace(run(t, filepath.Join(tree, "usr/bin/mesh-release"), "version")); got != testVersion {
		t.Errorf("the packaged mesh-release says %q, want %q", got, testVersion)
	}
}

// The unit runs serve as its own user on its own data directory, restarting on failure only; the
// postinst makes that user and purge removes it with the data.
func TestReleaseUnitRunsServeAsItsUserOnItsDataAndTheScriptsManageTheUser(t *testing.T) {
	a := built(t)
	unit, err := os.ReadFile(filepath.Join(a.repo, "dist/mesh-release.service"))
	if err != nil {
		t.Fatal(err)
	}
	directives := map[string][]string{}
	for _, line := range strings.Split(string(unit), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok && !strings.HasPrefix(line, "#") {
			directives[k] = append(directives[k], v)
		}
	}
	for _, tc := range []struct{ key, want string }{
		{"ExecStart", "/usr/bin/mesh-release serve --data /var/lib/mesh-release $MESH_RELEASE_SERVE_ARGS"},
		{"User", "mesh-release"},
		{"Group", "mesh-release"},
		{"Restart", "on-failure"},
		{"StateDirectory", "mesh-release"},
		{"StateDirectoryMode", "0700"},
		{"NoNewPrivileges", "yes"},
		{"ProtectSystem", "strict"},
		{"WantedBy", "multi-user.target"},
	} {
		if got := directives[tc.key]; len(got) != 1 || got[0] != tc.want {
			t.Errorf("%s=%q, want %q", tc.key, got, tc.want)
		}
	}
	for _, tc := range []struct{ script, want string }{
		{"dist/release-deb/postinst", "adduser --system"},
		{"dist/release-deb/postrm", "rm -rf /var/lib/mesh-release"},
		{"dist/release-deb/postrm", "deluser --system"},
		{"dist/release-deb/prerm", "systemctl disable --now mesh-release.service"},
	} {
		b, err := os.ReadFile(filepath.Join(a.repo, tc.script))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Contains(b, []byte(tc.want)) {
			t.Errorf("%s does not run %q", tc.script, tc.want)
		}
	}
}

// systemd-analyze verifies the unit as installed: the package's tree as the root, with the
// targets it names from this machine's systemd.
func TestReleaseUnitPassesSystemdAnalyzeVerify(t *testing.T) {
	needDpkgDeb(t)
	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		meshtest.SkipUnlessCI(t, "systemd-analyze is not installed (package systemd); .ci/run installs it")
	}
	a := built(t)
	root := t.TempDir()
	run(t, "dpkg-deb", "-x", a.releaseDeb, root)
	units := filepath.Join(root, "usr/lib/systemd/system")
	if err := os.MkdirAll(units, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/systemd/system"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{"network-online.target", "multi-user.target", "basic.target", "sysinit.target"} {
		for _, dir := range []string{"/usr/lib/systemd/system", "/lib/systemd/system"} {
			if b, err := os.ReadFile(filepath.Join(dir, target)); err == nil {
				if err := os.WriteFile(filepath.Join(units, target), b, 0o644); err != nil {
					t.Fatal(err)
				}
				break
			}
		}
	}
	out, err := exec.Command(analyze, "verify", "--man=no", "--root="+root, "mesh-release.service").CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify mesh-release.service: %v\n%s", err, out)
	}
}

// Each packaged man page is the binary's own help in roff: every command its --help lists has a
// section, and each of those commands' flags is there.
func TestManPagesDescribeEveryCommandAndFlagTheBinariesHelpLists(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	hostTree, releaseTree := t.TempDir(), t.TempDir()
	run(t, "dpkg-deb", "-x", a.deb, hostTree)
	run(t, "dpkg-deb", "-x", a.releaseDeb, releaseTree)
	for _, tc := range []struct{ name, binary, page string }{
		{"mesh-launcher", filepath.Join(hostTree, "usr/bin/mesh-launcher"), filepath.Join(hostTree, "usr/share/man/man8/mesh-launcher.8.gz")},
		{"mesh-host", filepath.Join(hostTree, "usr/share/mesh-host/mesh-host"), filepath.Join(hostTree, "usr/share/man/man8/mesh-host.8.gz")},
		{"mesh-release", filepath.Join(releaseTree, "usr/bin/mesh-release"), filepath.Join(releaseTree, "usr/share/man/man1/mesh-release.1.gz")},
		// mesh-lab has no package (it needs Go and a source tree): its page is in OUT/man.
		{"mesh-lab", "", filepath.Join(a.out, "man/mesh-lab.1.gz")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := gunzip(t, tc.page)
			section := map[string]string{".8.gz": "8", ".1.gz": "1"}[tc.page[len(tc.page)-5:]]
			if !strings.HasPrefix(page, `.\" Generated by dist/gendoc`) || !strings.Contains(page, "\n.TH "+strings.ToUpper(tc.name)+" "+section+" ") {
				t.Fatalf("%s is no man page of %s in section %s:\n%s", tc.page, tc.name, section, text.Cut(page, 2000))
			}
			if !strings.Contains(page, testVersion) {
				t.Errorf("%s does not name the version %s", tc.page, testVersion)
			}
			if tc.binary == "" {
				return
			}
			for _, cmd := range helpCommands(t, tc.binary) {
				if !strings.Contains(page, "\n.SS "+roff(cmd)+"\n") {
					t.Errorf("%s has no section for the command %s", tc.page, cmd)
					continue
				}
				for _, flag := range helpFlags(t, tc.binary, cmd) {
					if !strings.Contains(page, `\fB\-\-`+roff(flag)+`\fR`) {
						t.Errorf("%s does not describe %s --%s", tc.page, cmd, flag)
					}
				}
			}
		})
	}
}

// The bash completion, sourced as bash-completion would, completes a command from its prefix and
// a command's flag from its prefix; the zsh one parses.
func TestCompletionsCompleteCommandsAndFlags(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	hostTree, releaseTree := t.TempDir(), t.TempDir()
	run(t, "dpkg-deb", "-x", a.deb, hostTree)
	run(t, "dpkg-deb", "-x", a.releaseDeb, releaseTree)
	bashFile := func(tree, name string) string {
		return filepath.Join(tree, "usr/share/bash-completion/completions", name)
	}
	for _, tc := range []struct {
		name, file string
		words      []string
		want       string
	}{
		{"a command from its prefix", bashFile(releaseTree, "mesh-release"), []string{"mesh-release", "ser"}, "serve"},
		{"a command's flags from a prefix", bashFile(releaseTree, "mesh-release"), []string{"mesh-release", "serve", "--tls-"}, "--tls-cert --tls-key --tls-name"},
		{"another command's flags", bashFile(releaseTree, "mesh-release"), []string{"mesh-release", "fleet", "--w"}, "--watch"},
		{"nothing of its own for a flag's value", bashFile(releaseTree, "mesh-release"), []string{"mesh-release", "serve", "--data", ""}, ""},
		{"the launcher's commands", bashFile(hostTree, "mesh-launcher"), []string{"mesh-launcher", "st"}, "stopped status"},
		{"the host's flags", bashFile(hostTree, "mesh-host"), []string{"mesh-host", "apply", "--b"}, "--bundle"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fn := "_" + strings.ReplaceAll(tc.words[0], "-", "_")
			quoted := make([]string, len(tc.words))
			for i, w := range tc.words {
				quoted[i] = "'" + w + "'"
			}
			script := "source '" + tc.file + "'; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" +
				strconv.Itoa(len(tc.words)-1) + "; " + fn + "; echo \"${COMPREPLY[*]}\""
			got := strings.TrimSpace(run(t, "bash", "--norc", "--noprofile", "-c", script))
			if got != tc.want {
				t.Errorf("completing %q: %q, want %q", tc.words, got, tc.want)
			}
		})
	}
	t.Run("zsh parses its completions", func(t *testing.T) {
		zsh, err := exec.LookPath("zsh")
		if err != nil {
			meshtest.SkipUnlessCI(t, "zsh is not installed (Debian's zsh package; .ci/run installs it): the zsh completions are not parsed here")
		}
		for _, f := range []string{
			filepath.Join(releaseTree, "usr/share/zsh/vendor-completions/_mesh-release"),
			filepath.Join(hostTree, "usr/share/zsh/vendor-completions/_mesh-launcher"),
			filepath.Join(hostTree, "usr/share/zsh/vendor-completions/_mesh-host"),
		} {
			if out, err := exec.Command(zsh, "-n", f).CombinedOutput(); err != nil {
				t.Errorf("zsh -n %s: %v\n%s", f, err, out)
			}
		}
	})
}

// A native package's /usr/share/doc/<pkg>/changelog.gz is its Debian changelog: its first entry
// names the package and the version the control file says.
func TestDocChangelogsAreDebianChangelogsOfThisVersion(t *testing.T) {
	needDpkgDeb(t)
	a := built(t)
	for _, tc := range []struct{ pkg, deb string }{{"mesh-host", a.deb}, {"mesh-release", a.releaseDeb}} {
		t.Run(tc.pkg, func(t *testing.T) {
			tree := t.TempDir()
			run(t, "dpkg-deb", "-x", tc.deb, tree)
			text := gunzip(t, filepath.Join(tree, "usr/share/doc", tc.pkg, "changelog.gz"))
			first, _, _ := strings.Cut(text, "\n")
			if want := tc.pkg + " (" + debVersion + ") unstable; urgency=medium"; first != want {
				t.Errorf("the changelog opens with %q, want %q", first, want)
			}
			if !regexp.MustCompile(`(?m)^ -- .+ <.+>  \w{3}, \d{2} \w{3} \d{4} \d{2}:\d{2}:\d{2} \+0000$`).MatchString(text) {
				t.Errorf("the changelog has no signature line:\n%s", text)
			}
			if _, err := os.Stat(filepath.Join(tree, "usr/share/doc", tc.pkg, "copyright")); err != nil {
				t.Error(err)
			}
		})
	}
}

// lintian finds no error and no warning that the package's override file does not explain (each
// override is argued in the file and in decision 0033), in the node's package for every
// architecture and the release tool's: one lintian run over all of them.
func TestLintianFindsNoErrorOrWarningNotOverridden(t *testing.T) {
	if _, err := exec.LookPath("lintian"); err != nil {
		meshtest.SkipUnlessCI(t, "lintian is not installed (Debian's lintian package); .ci/run installs it")
	}
	a := built(t)
	args := []string{"--pedantic", "--info", a.releaseDeb}
	for _, p := range a.nodes {
		args = append(args, p.deb)
	}
	cmd := exec.Command("lintian", args...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var tags []string
	sc := bufio.NewScanner(&stdout)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "E: ") || strings.HasPrefix(line, "W: ") {
			tags = append(tags, line)
		}
	}
	if len(tags) > 0 {
		t.Errorf("lintian:\n%s", strings.Join(tags, "\n"))
	}
	// lintian exits 2 when it could not check; 1 only for tags, which the lines above show.
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Errorf("lintian: %v\n%s", err, stderr.String())
	}
}

func TestReleaseTarballHoldsTheToolItsUnitPageCompletionsAndAReadme(t *testing.T) {
	a := built(t)
	entries := readTarball(t, a.releaseTarball)
	top := a.releaseTop
	want := map[string]int64{
		top + "/":                     0o755,
		top + "/mesh-release":         0o755,
		top + "/mesh-release.service": 0o644,
		top + "/mesh-release.1.gz":    0o644,
		top + "/mesh-release.bash":    0o644,
		top + "/_mesh-release":        0o644,
		top + "/README":               0o644,
	}
	for name, mode := range want {
		h, ok := entries[name]
		if !ok {
			t.Errorf("the tarball has no %s", name)
			continue
		}
		if h.Mode&0o7777 != mode {
			t.Errorf("%s has mode %o, want %o", name, h.Mode&0o7777, mode)
		}
		if h.Uid != 0 || h.Gid != 0 {
			t.Errorf("%s is owned by %d:%d, want 0:0", name, h.Uid, h.Gid)
		}
	}
	for name := range entries {
		if _, ok := want[name]; !ok {
			t.Errorf("the tarball holds %s, which nothing asked for", name)
		}
	}
}

// The operator's laptop: mesh-release for macOS on Apple silicon, an arm64 Mach-O executable.
func TestDarwinBinaryIsAnArm64MachOExecutable(t *testing.T) {
	a := built(t)
	f, err := macho.Open(a.darwin)
	if err != nil {
		t.Fatalf("%s is no Mach-O file: %v", a.darwin, err)
	}
	defer f.Close()
	if f.Cpu != macho.CpuArm64 || f.Type != macho.TypeExec {
		t.Errorf("%s is a Mach-O %v of type %v, want an arm64 executable", a.darwin, f.Cpu, f.Type)
	}
	if fi, err := os.Stat(a.darwin); err != nil || fi.Mode().Perm() != 0o755 {
		t.Errorf("%s: %v, mode want 0755", a.darwin, err)
	}
}

// helpCommands are the commands binary --help lists.
func helpCommands(t *testing.T, binary string) []string {
	t.Helper()
	var cmds []string
	in := false
	for _, line := range strings.Split(run(t, binary, "--help"), "\n") {
		switch {
		case line == "commands:":
			in = true
		case in && line == "":
			return cmds
		case in:
			if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "    ") {
				cmds = append(cmds, f[0])
			}
		}
	}
	return cmds
}

// helpFlags are the flags binary CMD --help lists, as Go's flag package prints them.
func helpFlags(t *testing.T, binary, cmd string) []string {
	t.Helper()
	var flags []string
	re := regexp.MustCompile(`^  -(\S+)`)
	for _, line := range strings.Split(run(t, binary, cmd, "--help"), "\n") {
		if m := re.FindStringSubmatch(line); m != nil {
			flags = append(flags, m[1])
		}
	}
	return flags
}

// roff is s with hyphens as roff writes a minus.
func roff(s string) string { return strings.ReplaceAll(s, "-", `\-`) }

func gunzip(t *testing.T, path string) string {
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
	b, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return string(b)
}
