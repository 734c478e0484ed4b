package dist

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// apacheLicenseSHA256 is the digest of the Apache License 2.0's text as apache.org publishes it
// (and as NATS, go-systemd and go-digest ship it in their LICENSE files).
const apacheLicenseSHA256 = "c71d239df91726fc519c6eb72d318ec65820627232b2f796219e87dcf35d0ab4"

// The project is published under Apache-2.0: LICENSE is the licence's whole text, byte for byte,
// and both packages' copyright file (dist/copyright) says so in Debian's machine-readable format
// (DEP-5): a header paragraph, a Files paragraph naming the licence, and a stand-alone License
// paragraph pointing at Debian's own copy of the text, as lintian wants for a common licence.
func TestTheProjectIsApacheLicensedInLICENSEAndInTheCopyrightFile(t *testing.T) {
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	text, err := os.ReadFile(filepath.Join(repo, "LICENSE"))
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(text); hex.EncodeToString(sum[:]) != apacheLicenseSHA256 {
		t.Errorf("LICENSE is not the Apache License 2.0's text byte for byte (sha256 %x)", sum)
	}
	b, err := os.ReadFile(filepath.Join(repo, "dist", "copyright"))
	if err != nil {
		t.Fatal(err)
	}
	paras := dep5Paragraphs(t, string(b))
	for _, tc := range []struct {
		name  string
		para  int
		field string
		want  string
	}{
		{"the format", 0, "Format", "https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"},
		{"the upstream name", 0, "Upstream-Name", "mesh-host"},
		{"every file's licence", 1, "Files", "*"},
		{"every file's licence", 1, "License", "Apache-2.0"},
		{"the licence paragraph", 2, "License", "Apache-2.0"},
	} {
		t.Run(tc.name+" "+tc.field, func(t *testing.T) {
			if tc.para >= len(paras) {
				t.Fatalf("dist/copyright has %d paragraphs, want at least %d", len(paras), tc.para+1)
			}
			if got := paras[tc.para][tc.field]; got != tc.want {
				t.Errorf("paragraph %d's %s is %q, want %q", tc.para+1, tc.field, got, tc.want)
			}
		})
	}
	if len(paras) > 1 && paras[1]["Copyright"] == "" {
		t.Error("the Files paragraph has no Copyright field")
	}
	if len(paras) > 2 && !strings.Contains(paras[2]["License+"], `"/usr/share/common-licenses/Apache-2.0"`) {
		t.Errorf("the License paragraph does not point at Debian's copy of the text:\n%s", paras[2]["License+"])
	}
}

// dep5Paragraphs splits a DEP-5 file into its paragraphs, each field's first line under its name
// and its continuation lines (one space indented) under name+"+". A line that is neither a field
// nor a continuation fails the test: a malformed file is what lintian would refuse.
func dep5Paragraphs(t *testing.T, text string) []map[string]string {
	t.Helper()
	var out []map[string]string
	var cur map[string]string
	last := ""
	for i, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.TrimSpace(line) == "":
			cur, last = nil, ""
		case strings.HasPrefix(line, " "):
			if last == "" {
				t.Fatalf("dist/copyright line %d continues no field: %q", i+1, line)
			}
			cur[last+"+"] += strings.TrimPrefix(line, " ") + "\n"
		default:
			name, value, ok := strings.Cut(line, ":")
			if !ok || strings.ContainsAny(name, " \t") {
				t.Fatalf("dist/copyright line %d is not a field: %q", i+1, line)
			}
			if cur == nil {
				cur = map[string]string{}
				out = append(out, cur)
			}
			if _, dup := cur[name]; dup {
				t.Fatalf("dist/copyright line %d repeats the field %s in its paragraph", i+1, name)
			}
			cur[name], last = strings.TrimSpace(value), name
		}
	}
	return out
}
