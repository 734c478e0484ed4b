package trust

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A rollover's files (decision 0046): add keeps one new CA; switch makes it the servers' and
// keeps the old in previous/; a switch cut short between the CA's key and certificate is finished
// by running it again; drop retires the old; add is refused while one is not dropped.
func TestCARolloverFilesAndASwitchCutShort(t *testing.T) {
	data := t.TempDir()
	if _, _, _, err := EnsureTLS(data, nil); err != nil {
		t.Fatal(err)
	}
	before, err := ReadCAs(data)
	if err != nil {
		t.Fatal(err)
	}
	next, made, err := AddCA(data)
	if err != nil || !made {
		t.Fatalf("add: %v, made %v", err, made)
	}
	if again, made, err := AddCA(data); err != nil || made || !again.Equal(next) {
		t.Fatalf("add again: %v, made %v", err, made)
	}
	// Cut short: the new CA's key written over the old one's, its certificate not yet.
	dir := filepath.Join(data, TLSDir)
	if err := keepPrevious(dir, before.Current); err != nil {
		t.Fatal(err)
	}
	key, _ := os.ReadFile(filepath.Join(dir, NextCADir, CAKeyFile))
	if err := os.WriteFile(filepath.Join(dir, CAKeyFile), key, 0o600); err != nil {
		t.Fatal(err)
	}
	after, err := SwitchCA(data)
	if err != nil {
		t.Fatal(err)
	}
	if !after.Current.Equal(next) || !after.Previous.Equal(before.Current) || after.Next != nil {
		t.Fatalf("after the switch: %+v", after)
	}
	if _, _, _, err := EnsureTLS(data, nil); err != nil {
		t.Fatalf("serve's next start: %v", err)
	}
	if got, _ := ReadCAs(data); !got.Current.Equal(next) {
		t.Fatal("serve's next start made its own CA the servers' again")
	}
	if _, _, err := AddCA(data); err == nil || !strings.Contains(err.Error(), "not dropped yet") {
		t.Fatalf("add before drop: %v", err)
	}
	dropped, err := DropCA(data)
	if err != nil || !dropped.Equal(before.Current) {
		t.Fatalf("drop: %v", err)
	}
	if got, _ := ReadCAs(data); got.Previous != nil || len(got.Bundle()) != 1 {
		t.Fatalf("after drop: %+v", got)
	}
}
