package rollback

import (
	"io/fs"
	"syscall"
)

// fileIdentity reads fi's identity from the stat the kernel returned.
func fileIdentity(fi fs.FileInfo) (fileKey, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return fileKey{}, false
	}
	return fileKey{uint64(st.Dev), st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano()}, true
}
