package deliver

// env is every system call delivery needs that a test must be able to replace — the one seam
// (tableflip's env.go pattern). Everything else in the tests is real.
type env struct {
	// freeSpace is the number of bytes an unprivileged writer may still use on the file
	// system holding dir.
	freeSpace func(dir string) (uint64, error)
	// machine is the kernel's name of the machine (uname -m), which tells arm's variant.
	machine func() (string, error)
}

var stdEnv = env{freeSpace: statfsFree, machine: unameMachine}
