package deliver

// env is every system call delivery needs that a test must be able to replace — the one seam
// (tableflip's env.go pattern). Everything else in the tests is real.
type env struct {
	// freeSpace is the number of bytes an unprivileged writer may still use on the file
	// system holding dir.
	freeSpace func(dir string) (uint64, error)
}

var stdEnv = env{freeSpace: statfsFree}
