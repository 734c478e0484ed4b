// Package cmdline is how the mesh-* programs' commands answer, in one place: `--help` prints the
// command's usage on stdout and exits 0; a bad flag or a stray argument is said once on stderr,
// with a pointer to `--help`, and exits 2. (mesh-release, whose commands take arguments and a
// bus, builds on the same rule in its own cli.go.)
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// ExitUsage is the exit status of a command line that could not be understood.
const ExitUsage = 2

// Program is a program's name, as its usage and errors say it ("mesh-launcher").
type Program string

// NewFlagSet is the flag set of the command name, with about as its description. It prints
// nothing itself: Parse says each thing once.
func (p Program) NewFlagSet(name, about string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := fs.Output()
		fmt.Fprintf(w, "usage: %s %s", p, name)
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprint(w, " [flags]")
		}
		fmt.Fprintf(w, "\n\n%s\n", about)
		if n > 0 {
			fmt.Fprintln(w, "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// Parse parses the args of a command that takes flags only. ok is false when the command should
// stop at once with code: 0 after printing its usage for --help, ExitUsage after saying what was
// wrong.
func (p Program) Parse(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (code int, ok bool) {
	err := fs.Parse(args)
	if err == nil && fs.NArg() > 0 {
		err = fmt.Errorf("unexpected argument %q; this command takes flags only", fs.Arg(0))
	}
	switch {
	case err == nil:
		return 0, true
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		return 0, false
	}
	fmt.Fprintf(stderr, "%s %s: %v\nrun `%s %s --help` for usage\n", p, fs.Name(), err, p, fs.Name())
	return ExitUsage, false
}
