package systemd

import (
	"os"
	"path/filepath"
	"testing"
)

func TestMirrorIsTheMainDebianArchiveInEitherSourcesFormat(t *testing.T) {
	cases := []struct {
		name, file, body, want string
	}{
		{"deb822 skips security", "debian.sources", `Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main

Types: deb
URIs: http://mirror.example/debian/
Suites: bookworm bookworm-updates
Components: main
`, "http://mirror.example/debian"},
		{"deb822 skips deb-src", "src.sources", `Types: deb-src
URIs: http://src.example/debian
Suites: bookworm
`, ""},
		{"one-line with options", "sources.list", `# comment
deb-src http://src.example/debian bookworm main
deb [arch=amd64 signed-by=/k.gpg] http://one.example/debian bookworm main
`, "http://one.example/debian"},
		{"not debian", "other.list", "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main\n", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), c.file)
			if err := os.WriteFile(p, []byte(c.body), 0o644); err != nil {
				t.Fatal(err)
			}
			if got := mirrorIn(p); got != c.want {
				t.Errorf("mirrorIn = %q, want %q", got, c.want)
			}
		})
	}
}

func TestRootfsKeyChangesWithEveryInput(t *testing.T) {
	base := RootfsSpec{}.withDefaults()
	base.Mirror = "http://deb.debian.org/debian"
	seen := map[string]string{base.Key(): "base"}
	vary := map[string]func(*RootfsSpec){
		"suite":   func(s *RootfsSpec) { s.Suite = "trixie" },
		"variant": func(s *RootfsSpec) { s.Variant = "buildd" },
		"include": func(s *RootfsSpec) { s.Include = append(s.Include, "curl") },
		"mirror":  func(s *RootfsSpec) { s.Mirror = "http://mirror.example/debian" },
		"arch":    func(s *RootfsSpec) { s.Arch = "arm64" },
	}
	for name, f := range vary {
		s := base
		s.Include = append([]string(nil), base.Include...)
		f(&s)
		k := s.Key()
		if other, ok := seen[k]; ok {
			t.Errorf("changing %s keeps the key of %s: %s", name, other, k)
		}
		seen[k] = name
	}
	again := RootfsSpec{}.withDefaults()
	again.Mirror = base.Mirror
	if again.Key() != base.Key() {
		t.Errorf("the same inputs give two keys: %s, %s", again.Key(), base.Key())
	}
}
