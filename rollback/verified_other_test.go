//go:build !linux

package rollback

import "testing"

// Where the platform gives no file identity there is no proof: every Choose reads the binary.
func TestWithoutFileIdentityEveryChooseHashes(t *testing.T) {
	root := newRoot(t)
	stage(t, root, "v1.0.0", "")
	r, _ := openRecords(t, root)
	for i := 1; i <= 2; i++ {
		if ch := see(t, r, root); ch.Version != "v1.0.0" {
			t.Fatalf("Choose = %q, want v1.0.0", ch.Version)
		}
		if n := r.Hashed(); n != i {
			t.Errorf("after %d Chooses the binary was hashed %d times, want %d", i, n, i)
		}
	}
}
