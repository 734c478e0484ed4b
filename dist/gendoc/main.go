// Command gendoc writes the man pages, completions and changelogs the packages carry, from the
// binaries themselves.
//
// So none of it is written by hand and none can drift from the code:
//
//	gendoc pages -out DIR -version V -date EPOCH BINARY[:SECTION]...
//
// runs each BINARY's --help and each of its commands' --help and writes, under DIR, a man page
// (man/NAME.SECTION.gz, roff), a bash completion (bash/NAME) and a zsh one (zsh/_NAME) for its
// commands and their flags. The binaries must run here: `make package` builds them for this
// machine for this alone, whatever architecture it packages.
//
//	gendoc changelog -o FILE -package P -version V -date EPOCH -maintainer M
//
// writes the Debian changelog (gzipped, as changelog.gz) of a native package: one entry for the
// version packaged, pointing at the project's CHANGELOG.md.
//
// Everything is stamped with EPOCH (SOURCE_DATE_EPOCH) and gzipped with no name or time, so the
// same binaries give the same bytes. docs/decisions/0033-the-release-tool-packaged.md says why.
package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"time"
)

// summaries are the man pages' NAME lines: the one sentence each binary's help does not have
// (its top help lists commands, not what the program is).
var summaries = map[string]string{
	"mesh-host":     "the node agent: holds a node in its declared state, started by mesh-launcher",
	"mesh-launcher": "runs the newest good mesh-host version and rolls back once",
	"mesh-release":  "the fleet's release tool: the bus, releases, rollouts and the fleet's view",
	"mesh-lab":      "the lab: a narrated demo and a local fleet to try commands against",
}

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gendoc:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) == 0 {
		return errors.New("usage: gendoc pages|changelog [flags]")
	}
	switch args[0] {
	case "pages":
		return runPages(args[1:])
	case "changelog":
		return runChangelog(args[1:])
	}
	return fmt.Errorf("unknown command %q: want pages or changelog", args[0])
}

func runPages(args []string) error {
	fs := flag.NewFlagSet("pages", flag.ContinueOnError)
	out := fs.String("out", "", "directory to write man/, bash/ and zsh/ under")
	version := fs.String("version", "", "the version the pages name")
	epoch := fs.Int64("date", 0, "the pages' date, seconds since 1970 (SOURCE_DATE_EPOCH)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *version == "" || fs.NArg() == 0 {
		return errors.New("pages needs -out DIR, -version V and at least one BINARY[:SECTION]")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	date := time.Unix(*epoch, 0).UTC()
	for _, arg := range fs.Args() {
		bin, section, ok := strings.Cut(arg, ":")
		if !ok {
			section = "1"
		}
		p, err := readProgram(ctx, bin)
		if err != nil {
			return err
		}
		p.section, p.version, p.date = section, *version, date
		man, err := gz([]byte(p.roff()))
		if err != nil {
			return err
		}
		for _, f := range []struct {
			path string
			data []byte
		}{
			{filepath.Join(*out, "man", p.name+"."+section+".gz"), man},
			{filepath.Join(*out, "bash", p.name), []byte(p.bash())},
			{filepath.Join(*out, "zsh", "_"+p.name), []byte(p.zsh())},
		} {
			if err := writeFile(f.path, f.data); err != nil {
				return err
			}
		}
	}
	return nil
}

func runChangelog(args []string) error {
	fs := flag.NewFlagSet("changelog", flag.ContinueOnError)
	out := fs.String("o", "", "the changelog.gz to write")
	pkg := fs.String("package", "", "the package's name")
	version := fs.String("version", "", "the version packaged (v-prefixed semantic version)")
	epoch := fs.Int64("date", 0, "the entry's date, seconds since 1970 (SOURCE_DATE_EPOCH)")
	maintainer := fs.String("maintainer", "", "Name <address> of the entry's signer")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *out == "" || *pkg == "" || *version == "" || *maintainer == "" {
		return errors.New("changelog needs -o FILE, -package P, -version V and -maintainer M")
	}
	text := fmt.Sprintf("%s (%s) unstable; urgency=medium\n\n"+
		"  * Release %s. What changed is in the project's CHANGELOG.md:\n"+
		"    https://github.com/novox/mesh-host/blob/main/CHANGELOG.md\n\n"+
		" -- %s  %s\n",
		*pkg, DebianVersion(*version), *version, *maintainer,
		time.Unix(*epoch, 0).UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	data, err := gz([]byte(text))
	if err != nil {
		return err
	}
	return writeFile(*out, data)
}

// DebianVersion is the version nfpm gives a v-prefixed semantic version with version_schema
// semver: v1.4.1-dev.3 is 1.4.1~dev.3, which sorts before 1.4.1 as the semantic version does.
func DebianVersion(v string) string {
	v = strings.TrimPrefix(v, "v")
	core, pre, ok := strings.Cut(v, "-")
	if !ok {
		return v
	}
	return core + "~" + pre
}

// program is what one binary's help says.
type program struct {
	name             string
	synopsis         string   // the usage line, "usage: " cut off
	description      []string // the top help's text after its command list
	commands         []command
	section, version string
	date             time.Time
}

type command struct {
	name, summary string
	synopsis      string
	description   []string // paragraphs
	flags         []flagHelp
	environment   []flagHelp // name and what it stands for
}

type flagHelp struct {
	name, value, usage string // value is "" for a flag that takes none
}

// readProgram runs bin --help and bin CMD --help for each command the first lists.
func readProgram(ctx context.Context, bin string) (program, error) {
	top, err := help(ctx, bin)
	if err != nil {
		return program{}, err
	}
	p := program{name: filepath.Base(bin)}
	cmdLine := regexp.MustCompile(`^  (\S+)\s{2,}(\S.*)$`)
	inCommands := false
	for _, line := range strings.Split(top, "\n") {
		switch {
		case strings.HasPrefix(line, "usage: "):
			p.synopsis = strings.TrimPrefix(line, "usage: ")
		case line == "commands:":
			inCommands = true
		case inCommands && cmdLine.MatchString(line):
			m := cmdLine.FindStringSubmatch(line)
			p.commands = append(p.commands, command{name: m[1], summary: m[2]})
		case inCommands && strings.HasPrefix(line, "    ") && len(p.commands) > 0:
			c := &p.commands[len(p.commands)-1]
			c.summary += " " + strings.TrimSpace(line)
		case line == "":
			if inCommands && len(p.commands) > 0 {
				inCommands = false
			}
			p.description = append(p.description, "")
		default:
			if !inCommands {
				p.description = append(p.description, line)
			}
		}
	}
	if p.synopsis == "" || len(p.commands) == 0 {
		return program{}, fmt.Errorf("%s --help printed no usage line or no commands:\n%s", bin, top)
	}
	p.description = paragraphs(p.description)
	for i := range p.commands {
		c := &p.commands[i]
		text, err := help(ctx, bin, c.name)
		if err != nil {
			return program{}, err
		}
		if err := c.parse(text); err != nil {
			return program{}, fmt.Errorf("%s %s --help: %w", bin, c.name, err)
		}
	}
	return p, nil
}

// help is bin's help for args (none: the top help), which every binary here prints on stdout
// with exit 0 when asked with --help.
func help(ctx context.Context, bin string, args ...string) (string, error) {
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(args, "--help")...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// A fixed environment: help texts name defaults from it ($MESH_RELEASE_DATA and the like
	// print as such, but a set variable could leak into a default shown).
	cmd.Env = []string{"PATH=/usr/bin:/bin", "LANG=C"}
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%s %s --help: %w\n%s", bin, strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String() + stderr.String(), nil
}

var (
	flagLine = regexp.MustCompile(`^  -(\S+)(?: (\S+))?(?:\t(.*))?$`)
	envLine  = regexp.MustCompile(`^  ([A-Z][A-Z0-9_]*)\s+(\S.*)$`)
)

// parse reads a command's help: a usage line, paragraphs, then "flags:" as Go's flag package
// prints them and an "environment …:" list.
func (c *command) parse(text string) error {
	section := "description"
	var desc []string
	for _, line := range strings.Split(strings.TrimRight(text, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "usage: ") && c.synopsis == "":
			c.synopsis = strings.TrimPrefix(line, "usage: ")
			continue
		case line == "flags:":
			section = "flags"
			continue
		case strings.HasPrefix(line, "environment") && strings.HasSuffix(line, ":"):
			section = "environment"
			continue
		}
		switch section {
		case "description":
			desc = append(desc, line)
		case "flags":
			if m := flagLine.FindStringSubmatch(line); m != nil {
				c.flags = append(c.flags, flagHelp{name: m[1], value: m[2], usage: m[3]})
			} else if strings.HasPrefix(line, "    \t") && len(c.flags) > 0 {
				f := &c.flags[len(c.flags)-1]
				f.usage = strings.TrimSpace(f.usage + " " + strings.TrimSpace(line))
			} else if strings.TrimSpace(line) != "" {
				return fmt.Errorf("a flags line that is no flag: %q", line)
			}
		case "environment":
			if m := envLine.FindStringSubmatch(line); m != nil {
				c.environment = append(c.environment, flagHelp{name: m[1], usage: m[2]})
			} else if strings.TrimSpace(line) != "" && len(c.environment) > 0 {
				e := &c.environment[len(c.environment)-1]
				e.usage += " " + strings.TrimSpace(line)
			}
		}
	}
	if c.synopsis == "" {
		return errors.New("no usage line")
	}
	c.description = paragraphs(desc)
	return nil
}

// paragraphs joins lines into paragraphs at blank lines.
func paragraphs(lines []string) []string {
	var out []string
	var cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, " "))
			cur = nil
		}
	}
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			flush()
			continue
		}
		cur = append(cur, strings.TrimSpace(l))
	}
	flush()
	return out
}

// roffText escapes text for roff: backslashes, hyphens (a minus in flags and paths, which
// groff would otherwise render as a hyphen) and a control character opening a line.
func roffText(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	if strings.HasPrefix(s, ".") || strings.HasPrefix(s, "'") {
		s = `\&` + s
	}
	return s
}

func (p program) roff() string {
	var b strings.Builder
	up := strings.ToUpper(p.name)
	fmt.Fprintf(&b, ".\\\" Generated by dist/gendoc from %s's own --help; do not edit.\n", p.name)
	fmt.Fprintf(&b, ".TH %s %s %q %q %q\n", up, p.section, p.date.Format("2006-01-02"), p.name+" "+p.version, "mesh-host")
	b.WriteString(".SH NAME\n")
	summary := summaries[p.name]
	if summary == "" {
		summary = p.commands[0].summary
	}
	fmt.Fprintf(&b, "%s \\- %s\n", roffText(p.name), roffText(summary))
	b.WriteString(".SH SYNOPSIS\n")
	fmt.Fprintf(&b, ".B %s\n", roffText(p.synopsis))
	b.WriteString(".SH DESCRIPTION\n")
	b.WriteString(".PP\nThe commands:\n")
	for _, c := range p.commands {
		fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roffText(c.name), roffText(c.summary))
	}
	for _, para := range p.description {
		fmt.Fprintf(&b, ".PP\n%s\n", roffText(para))
	}
	b.WriteString(".SH COMMANDS\n")
	for _, c := range p.commands {
		fmt.Fprintf(&b, ".SS %s\n", roffText(c.name))
		fmt.Fprintf(&b, ".B %s\n", roffText(c.synopsis))
		for _, para := range c.description {
			fmt.Fprintf(&b, ".PP\n%s\n", roffText(para))
		}
		for _, f := range c.flags {
			b.WriteString(".TP\n")
			if f.value != "" {
				fmt.Fprintf(&b, "\\fB\\-\\-%s\\fR \\fI%s\\fR\n", roffText(f.name), roffText(f.value))
			} else {
				fmt.Fprintf(&b, "\\fB\\-\\-%s\\fR\n", roffText(f.name))
			}
			fmt.Fprintf(&b, "%s\n", roffText(f.usage))
		}
		for _, e := range c.environment {
			fmt.Fprintf(&b, ".TP\n.B %s\n%s\n", roffText(e.name), roffText(e.usage))
		}
	}
	b.WriteString(".SH SEE ALSO\n")
	b.WriteString("The project's README and docs/: https://github.com/novox/mesh\\-host\n")
	return b.String()
}

// fn is the shell function a completion defines: mesh-release is _mesh_release.
func (p program) fn() string { return "_" + strings.ReplaceAll(p.name, "-", "_") }

// bash completes the commands as the first word, then the command's flags (as --name) when
// the word starts with "-"; anything else, and a flag's value, falls to bash's default (file
// names), as -o default asks.
func (p program) bash() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# bash completion for %s, generated by dist/gendoc from its own --help; do not edit.\n", p.name)
	fmt.Fprintf(&b, "%s() {\n", p.fn())
	b.WriteString("\tlocal cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]} flags='' values=''\n")
	b.WriteString("\tCOMPREPLY=()\n")
	names := make([]string, len(p.commands))
	for i, c := range p.commands {
		names[i] = c.name
	}
	fmt.Fprintf(&b, "\tif [ \"$COMP_CWORD\" -eq 1 ]; then\n\t\tmapfile -t COMPREPLY < <(compgen -W '%s' -- \"$cur\")\n\t\treturn 0\n\tfi\n", strings.Join(names, " "))
	b.WriteString("\tcase ${COMP_WORDS[1]} in\n")
	for _, c := range p.commands {
		var all, values []string
		for _, f := range c.flags {
			all = append(all, "--"+f.name)
			if f.value != "" {
				values = append(values, "--"+f.name)
			}
		}
		fmt.Fprintf(&b, "\t%s) flags='%s' values=' %s ' ;;\n", c.name, strings.Join(all, " "), strings.Join(values, " "))
	}
	b.WriteString("\tesac\n")
	b.WriteString("\tcase $values in *\" $prev \"*) return 0 ;; esac\n")
	b.WriteString("\tif [[ $cur == -* ]]; then\n\t\tmapfile -t COMPREPLY < <(compgen -W \"$flags\" -- \"$cur\")\n\tfi\n")
	b.WriteString("\treturn 0\n}\n")
	fmt.Fprintf(&b, "complete -o default -F %s %s\n", p.fn(), p.name)
	return b.String()
}

// zshQuote single-quotes s for zsh.
func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// zshDesc is a flag's or command's description for _describe and _arguments: its first
// sentence, bounded, without the brackets and colons those specs use as syntax.
func zshDesc(s string) string {
	if i := strings.Index(s, ". "); i > 0 {
		s = s[:i]
	}
	if len(s) > 100 {
		s = strings.TrimSpace(s[:97]) + "..."
	}
	return strings.NewReplacer("[", "(", "]", ")", ":", " -", `\`, "/").Replace(s)
}

// zsh completes the commands with their summaries, then each command's flags with theirs;
// a flag naming a FILE or DIR completes paths.
func (p program) zsh() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#compdef %s\n", p.name)
	fmt.Fprintf(&b, "# zsh completion for %s, generated by dist/gendoc from its own --help; do not edit.\n", p.name)
	fmt.Fprintf(&b, "%s() {\n", p.fn())
	b.WriteString("\tlocal -a commands\n\tcommands=(\n")
	for _, c := range p.commands {
		fmt.Fprintf(&b, "\t\t%s\n", zshQuote(c.name+":"+zshDesc(c.summary)))
	}
	b.WriteString("\t)\n")
	b.WriteString("\tif (( CURRENT == 2 )); then\n")
	fmt.Fprintf(&b, "\t\t_describe -t commands %s commands\n\t\treturn\n\tfi\n", zshQuote(p.name+" command"))
	b.WriteString("\tshift words\n\t(( CURRENT-- ))\n")
	b.WriteString("\tcase $words[1] in\n")
	for _, c := range p.commands {
		fmt.Fprintf(&b, "\t%s)\n\t\t_arguments -S", c.name)
		flags := append([]flagHelp(nil), c.flags...)
		sort.Slice(flags, func(i, j int) bool { return flags[i].name < flags[j].name })
		for _, f := range flags {
			spec := "--" + f.name + "[" + zshDesc(f.usage) + "]"
			if strings.Contains(f.usage, "repeat") {
				spec = "*" + spec
			}
			if f.value != "" {
				action := " "
				switch f.value {
				case "FILE", "LOCK":
					action = "_files"
				case "DIR":
					action = "_files -/"
				}
				spec += ":" + strings.ReplaceAll(f.value, ":", "-") + ":" + action
			}
			fmt.Fprintf(&b, " \\\n\t\t\t%s", zshQuote(spec))
		}
		b.WriteString(" \\\n\t\t\t'*:argument:_files'\n\t\t;;\n")
	}
	b.WriteString("\t*) _files ;;\n\tesac\n}\n")
	fmt.Fprintf(&b, "%s \"$@\"\n", p.fn())
	return b.String()
}

// gz is data gzipped at the best compression with no name and no time, as `gzip -n -9`.
func gz(data []byte) ([]byte, error) {
	var buf bytes.Buffer
	w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write(data); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// writeFile writes data to path through a synced temp file and a rename, so a path holds a
// whole file or none.
func writeFile(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("make the directory of %s: %w", path, err)
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".gendoc-")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
