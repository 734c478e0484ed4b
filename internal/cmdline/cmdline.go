// Package cmdline is how the mesh-* programs' commands answer --help, a bad flag or a stray
// argument.
//
// In one place: `--help` prints the command's usage on stdout and exits 0; a bad flag or a stray
// argument is said once on stderr, with a pointer to `--help`, and exits 2. (mesh-release, whose
// commands take arguments and a bus, builds on the same rule in its own cli.go.)
package cmdline

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
)

// ExitUsage is the exit status of a command line that could not be understood.
const ExitUsage = 2

// Program is a program's name, as its usage and errors say it ("mesh-launcher").
type Program string

// NewFlagSet is the flag set of the command name, with about as its description. It prints
// nothing itself: Parse says each thing once.
func (p Program) NewFlagSet(name, about string) *flag.FlagSet {
	return p.NewFlagSetWithOperands(name, "", about)
}

// NewFlagSetWithOperands is NewFlagSet for a command that also takes operands, named in its
// usage line after [flags] ("FILE"); ParseOperands parses its command line.
func (p Program) NewFlagSetWithOperands(name, operands, about string) *flag.FlagSet {
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
		if operands != "" { // after the flags, as mesh-release's usages say them
			fmt.Fprintf(w, " %s", operands)
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

// ParseOperands parses the args of a command that takes exactly len(names) operands, before,
// between or after its flags (`install FILE --version v1.4.0` and `install --version v1.4.0
// FILE` alike; after "--" everything is an operand). It returns the operands; ok is false as for
// Parse, a missing operand or an extra one being said like a bad flag.
func (p Program) ParseOperands(fs *flag.FlagSet, args []string, names []string, stdout, stderr io.Writer) (operands []string, code int, ok bool) {
	var err error
	for rest := args; ; {
		if err = fs.Parse(rest); err != nil {
			break
		}
		left := fs.Args()
		if len(left) == 0 {
			break
		}
		if used := len(rest) - len(left); used > 0 && rest[used-1] == "--" {
			operands = append(operands, left...)
			break
		}
		operands, rest = append(operands, left[0]), left[1:]
	}
	switch {
	case err != nil:
	case len(operands) < len(names):
		err = fmt.Errorf("missing %s", names[len(operands)])
	case len(operands) > len(names):
		err = fmt.Errorf("unexpected argument %q; this command takes %s", operands[len(names)], strings.Join(names, " "))
	}
	if err == nil {
		return operands, 0, true
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.SetOutput(stdout)
		fs.Usage()
		return nil, 0, false
	}
	fmt.Fprintf(stderr, "%s %s: %v\nrun `%s %s --help` for usage\n", p, fs.Name(), err, p, fs.Name())
	return nil, ExitUsage, false
}

// Command is one of a program's commands: its name, a line for the program's usage, and what it
// does with the arguments after its name (returning the exit status).
type Command struct {
	Name    string
	Summary string
	Run     func(args []string) int
}

// Dispatch runs the command args[0] names. No arguments print the program's usage on stderr
// (exit 2); -h, --help and help print it on stdout (exit 0); --version and version print
// version; anything else is an unknown command or flag (exit 2). footer ends the usage.
func (p Program) Dispatch(args []string, stdout, stderr io.Writer, version, footer string, commands []Command) int {
	usage := func(w io.Writer) {
		fmt.Fprintf(w, "usage: %s <command> [flags]\n\ncommands:\n", p)
		for _, c := range commands {
			fmt.Fprintf(w, "  %-10s %s\n", c.Name, c.Summary)
		}
		fmt.Fprintf(w, "  %-10s %s\n", "version", "print this program's version")
		if footer != "" {
			fmt.Fprintf(w, "\n%s\n", footer)
		}
	}
	if len(args) == 0 {
		usage(stderr)
		return ExitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		usage(stdout)
		return 0
	case "-version", "--version":
		fmt.Fprintln(stdout, version)
		return 0
	case "version":
		if code, ok := p.Parse(p.NewFlagSet("version", "Print this program's version."), args[1:], stdout, stderr); !ok {
			return code
		}
		fmt.Fprintln(stdout, version)
		return 0
	}
	for _, c := range commands {
		if c.Name == args[0] {
			return c.Run(args[1:])
		}
	}
	what := "command"
	if args[0] != "" && args[0][0] == '-' {
		what = "flag" // before any command: flags belong after one
	}
	fmt.Fprintf(stderr, "%s: unknown %s %q\nrun `%s --help` for the commands\n", p, what, args[0], p)
	return ExitUsage
}
