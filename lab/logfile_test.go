package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// A node's log is kept to its cap, with the one before it beside it, however much is written;
// the newest lines are always in NAME.log.
func TestANodesLogStaysWithinItsCapKeepingTheNewestLines(t *testing.T) {
	const limit = 1000
	path := filepath.Join(t.TempDir(), "node-1.log")
	l, err := openCappedLog(path, limit)
	if err != nil {
		t.Fatal(err)
	}
	line := bytes.Repeat([]byte("x"), 99)
	for i := 0; i < 1000; i++ {
		line[0] = byte('a' + i%26)
		if _, err := l.Write(append(line, '\n')); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := l.Write([]byte("the last line\n")); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{path, path + ".1"} {
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Size() > limit {
			t.Errorf("%s is %d bytes after 100 KB written; want at most %d", filepath.Base(p), fi.Size(), limit)
		}
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasSuffix(b, []byte("the last line\n")) {
		t.Errorf("node-1.log ends %q; want the last line written", b[max(0, len(b)-40):])
	}
	// Opened again, it goes on from the size it has.
	l, err = openCappedLog(path, limit)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if _, err := l.Write(bytes.Repeat([]byte("y"), limit-len(b)+1)); err != nil {
		t.Fatal(err)
	}
	if b2, _ := os.ReadFile(path + ".1"); !bytes.Equal(b2, b) {
		t.Errorf("a write past the cap after reopening did not move the file aside")
	}
}
