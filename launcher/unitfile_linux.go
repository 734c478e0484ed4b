package launcher

import (
	"os"
	"syscall"
	"time"
)

// changeTime is fi's ctime: when the file was last put in place or changed, whatever mtime says.
func changeTime(fi os.FileInfo) time.Time {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return time.Unix(int64(st.Ctim.Sec), int64(st.Ctim.Nsec))
	}
	return time.Time{}
}
