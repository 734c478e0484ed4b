package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/novox/mesh-host/internal/text"
)

// How every mesh-release command answers, in one place: --help prints the command's usage on
// stdout and exits 0; a bad flag or argument is said once, with a pointer to --help, and exits
// 2; a failure exits 1; no arguments at all print the usage on stderr and exit 2. A command
// whose outcome is more than success or failure (a rollout halted, aborted) says it on stdout
// and returns an exitStatus.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

// exitStatus is an exit status a command chose, what it means already said.
type exitStatus int

func (e exitStatus) Error() string { return fmt.Sprintf("exit status %d", int(e)) }

// stdio is what a command reads and writes besides the bus: main passes the process's, tests
// their own.
type stdio struct {
	in       io.Reader
	out, err io.Writer
	getenv   func(string) string
	tty      bool // out is a terminal
}

func (s *stdio) printf(format string, args ...any) { fmt.Fprintf(s.out, format, args...) }
func (s *stdio) println(args ...any)               { fmt.Fprintln(s.out, args...) }

// usageError is a bad flag or argument: exit 2, said once, with a pointer to --help.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error { return usageError{fmt.Sprintf(format, args...)} }

// missingError is a required flag not given (--key): exit 2 like a usage error, but said in one
// line that says what to give, never with the whole usage.
type missingError struct{ msg string }

func (e missingError) Error() string { return e.msg }

// run runs the command line args (without the program name) and returns the exit status.
func run(ctx context.Context, s *stdio, args []string) int {
	if len(args) == 0 {
		usage(s.err)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help":
		usage(s.out)
		return exitOK
	case "help":
		if len(args) == 1 {
			usage(s.out)
			return exitOK
		}
		return run(ctx, s, append(args[1:len(args):len(args)], "--help")) // `help rollout start` too
	case "-version", "--version":
		s.println(version)
		return exitOK
	}
	c, ok := lookup(args[0])
	if !ok {
		return unknown(s, args[0])
	}
	fs := c.flagSet()
	return c.answer(s, fs, c.run(ctx, s, fs, args[1:]), len(args) == 1)
}

// answer turns what c's run returned into its exit status, saying it as the rules above want;
// alone is true when the command line was the command's name and nothing else.
func (c command) answer(s *stdio, fs *flag.FlagSet, err error, alone bool) int {
	var ue usageError
	var es exitStatus
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, flag.ErrHelp):
		c.usage(s.out, fs)
		return exitOK
	case errors.As(err, &es):
		return int(es)
	case errors.As(err, new(missingError)):
		fmt.Fprintf(s.err, "mesh-release %s: %s\n", c.name, c.said(err))
		return exitUsage
	case errors.As(err, &ue) && alone:
		// Nothing but the command: show it all, as for the program alone.
		fmt.Fprintf(s.err, "mesh-release %s: %v\n", c.name, err)
		c.usage(s.err, fs)
		return exitUsage
	case errors.As(err, &ue):
		fmt.Fprintf(s.err, "mesh-release %s: %v\nrun `mesh-release %s --help` for usage\n", c.name, err, c.name)
		return exitUsage
	}
	fmt.Fprintf(s.err, "mesh-release %s: %s\n", c.name, c.said(err))
	return exitError
}

// said is err's text without c's name in front: a library says what failed ("serve: …",
// "fleet: …"), and answer says the command's name once ("mesh-release serve: …"). For a
// subcommand ("rollout start") its command's name ("rollout: …") is left out too.
func (c command) said(err error) string {
	msg := err.Error()
	names := []string{c.name}
	if first, _, ok := strings.Cut(c.name, " "); ok {
		names = append(names, first)
	}
	for _, n := range names {
		msg = strings.TrimPrefix(msg, n+": ")
	}
	return msg
}

func lookup(name string) (command, bool) {
	for _, c := range commands {
		if c.name == name {
			return c, true
		}
	}
	return command{}, false
}

func unknown(s *stdio, name string) int {
	what, hint := "command", ""
	if strings.HasPrefix(name, "-") {
		what = "flag" // before any command: flags belong after one
	} else {
		hint = suggest(name, commandNames(commands, ""))
	}
	fmt.Fprintf(s.err, "mesh-release: unknown %s %q%s\nrun `mesh-release --help` for the commands\n", what, text.Bound(name), hint)
	return exitUsage
}

// dispatch runs the subcommand of parent (rollout, window, blob) that args name. Each
// subcommand answers as a command does: its own --help, usage errors and exit statuses; fs is
// parent's own flag set, which takes nothing but --help.
func dispatch(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string, parent string, subs []command) error {
	names := commandNames(subs, parent+" ")
	want := oneOf(names)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if err := noArgs(fs, args); err != nil {
			return err
		}
		return usagef("want a subcommand: %s", want)
	}
	var sub command
	for _, c := range subs {
		if c.name == parent+" "+args[0] {
			sub = c
		}
	}
	if sub.run == nil {
		return usagef("unknown subcommand %q; want %s%s", text.Bound(args[0]), want, suggest(args[0], names))
	}
	sfs := sub.flagSet()
	if code := sub.answer(s, sfs, sub.run(ctx, s, sfs, args[1:]), len(args) == 1); code != exitOK {
		return exitStatus(code)
	}
	return nil
}

// commandNames is the names of cs without prefix.
func commandNames(cs []command, prefix string) []string {
	names := make([]string, len(cs))
	for i, c := range cs {
		names[i] = strings.TrimPrefix(c.name, prefix)
	}
	return names
}

// oneOf lists names as a choice: "start, resume or watch".
func oneOf(names []string) string {
	if len(names) < 2 {
		return strings.Join(names, "")
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

// maxSuggestInput bounds the name suggest compares: a longer one is no typo of a command.
const maxSuggestInput = 32

// suggest is "; did you mean `NAME`?" for the one of names nearest to typed, when it is a typo
// away: at most one edit (a letter missed, added, changed or two swapped) per three letters of
// the name, and at least one. Otherwise "": a guess far off would only mislead. Ties go to the
// name listed first.
func suggest(typed string, names []string) string {
	if typed == "" || len(typed) > maxSuggestInput {
		return ""
	}
	best, bestD := "", 0
	for _, n := range names {
		d := editDistance(typed, n)
		if d <= max(1, len(n)/3) && (best == "" || d < bestD) {
			best, bestD = n, d
		}
	}
	if best == "" {
		return ""
	}
	return "; did you mean `" + best + "`?"
}

// editDistance is the optimal string alignment distance between a and b, in bytes: the edits
// (insert, delete, substitute, swap two neighbours) that turn a into b.
func editDistance(a, b string) int {
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: mesh-release <command> [flags] [arguments]")
	fmt.Fprintln(w, "\ncommands:")
	width := 0
	for _, c := range commands {
		width = max(width, len(c.name))
	}
	for _, c := range commands {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintf(w, `
Run `+"`mesh-release <command> --help`"+` for a command's flags and arguments.
Commands that use a bus take --nats URL, --creds FILE and --ca FILE, or read %s, %s
and %s. Commands that sign take --key FILE, or read %s; those that use serve's
directory take --data DIR, or read %s. The flags win.
`, envNATSURL, envNATSCreds, envNATSCA, envReleaseKey, envReleaseData)
}

// flagSet is c's empty flag set: it prints nothing itself, so that run says each thing once.
func (c command) flagSet() *flag.FlagSet {
	fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// usage prints c's help: the usage line naming its arguments, what it does, its flags and the
// environment it reads.
func (c command) usage(w io.Writer, fs *flag.FlagSet) {
	line := "mesh-release " + c.name
	hasFlags := false
	fs.VisitAll(func(*flag.Flag) { hasFlags = true })
	if hasFlags {
		line += " [flags]"
	}
	if c.args != "" {
		line += " " + c.args
	}
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", line, strings.ToUpper(c.summary[:1])+c.summary[1:])
	if c.about != "" {
		fmt.Fprintf(w, "%s\n", c.about)
	}
	if hasFlags {
		fmt.Fprintln(w, "\nflags:")
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	var env []string
	if fs.Lookup("nats") != nil {
		env = append(env, fmt.Sprintf("  %-18s the bus URL when --nats is not given", envNATSURL),
			fmt.Sprintf("  %-18s the credentials file when --creds is not given", envNATSCreds),
			fmt.Sprintf("  %-18s the CA file when --ca is not given", envNATSCA))
	}
	if fs.Lookup("key") != nil {
		env = append(env, fmt.Sprintf("  %-18s the key file when --key is not given", envReleaseKey))
	}
	if fs.Lookup("data") != nil {
		env = append(env, fmt.Sprintf("  %-18s serve's directory when --data is not given", envReleaseData))
	}
	if len(env) > 0 {
		fmt.Fprintf(w, "\nenvironment (the flags win):\n%s\n", strings.Join(env, "\n"))
	}
}

func isTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
