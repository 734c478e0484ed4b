package lab

import (
	"bytes"
	"testing"
)

// A cold build takes minutes; the builder says what it is building before each build, so `make
// demo` is not silent while it waits, and says nothing for a binary it already built.
func TestBuilderSaysWhatItBuildsBeforeEachBuild(t *testing.T) {
	b, err := NewBuilder(t.Context(), bins.Src, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	var progress bytes.Buffer
	b.Progress = &progress
	for range 2 {
		if _, err := b.Build(t.Context(), PkgExit0, "v9.8.7"); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := progress.String(), "  go build ./lab/fixtures/exit0 as v9.8.7 …\n"; got != want {
		t.Errorf("progress %q, want %q (once, before the first build only)", got, want)
	}
}
