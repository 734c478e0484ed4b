package main

import (
	"strings"
	"testing"
)

func TestDebianVersionIsNfpmsForSemver(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"v1.4.1-dev.3", "1.4.1~dev.3"},
		{"v0.0.0-dev.12", "0.0.0~dev.12"},
		{"1.0.0-rc.1", "1.0.0~rc.1"},
	} {
		if got := DebianVersion(tc.in); got != tc.want {
			t.Errorf("DebianVersion(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestRoffTextEscapesBackslashesMinusesAndControlLines(t *testing.T) {
	for _, tc := range []struct{ name, in, want string }{
		{"a flag's minus", "--data DIR", `\-\-data DIR`},
		{"a backslash", `a\b`, `a\eb`},
		{"a line opening with a dot", ".hidden is a file", `\&.hidden is a file`},
		{"a line opening with a quote", "'quoted'", `\&'quoted'`},
		{"plain text", "plain", "plain"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := roffText(tc.in); got != tc.want {
				t.Errorf("roffText(%q) = %q, want %q", tc.in, got, tc.want)
			}
		})
	}
}

// A command's help as Go's flag package and the binaries print it: usage, paragraphs, flags
// (with and without a value, one-letter ones on one line, usage over two lines), environment.
const serveHelp = `usage: tool serve [flags]

Serve things.
Over two lines.

Another paragraph.

flags:
  -data DIR
    	DIR for the data (default $X)
  -insecure
    	serve without TLS
  -n	how many, on the flag's line
  -limit duration
    	how long
    	and a second line

environment (the flags win):
  TOOL_DATA  the data directory when --data is not given
`

func TestCommandParseReadsUsageParagraphsFlagsAndEnvironment(t *testing.T) {
	var c command
	if err := c.parse(serveHelp); err != nil {
		t.Fatal(err)
	}
	if c.synopsis != "tool serve [flags]" {
		t.Errorf("synopsis %q", c.synopsis)
	}
	if want := []string{"Serve things. Over two lines.", "Another paragraph."}; strings.Join(c.description, "|") != strings.Join(want, "|") {
		t.Errorf("description %q, want %q", c.description, want)
	}
	want := []flagHelp{
		{"data", "DIR", "DIR for the data (default $X)"},
		{"insecure", "", "serve without TLS"},
		{"n", "", "how many, on the flag's line"},
		{"limit", "duration", "how long and a second line"},
	}
	if len(c.flags) != len(want) {
		t.Fatalf("flags %q, want %q", c.flags, want)
	}
	for i := range want {
		if c.flags[i] != want[i] {
			t.Errorf("flag %d: %q, want %q", i, c.flags[i], want[i])
		}
	}
	if len(c.environment) != 1 || c.environment[0].name != "TOOL_DATA" {
		t.Errorf("environment %q", c.environment)
	}
}

func TestCommandParseRefusesHelpItCannotRead(t *testing.T) {
	for _, tc := range []struct{ name, help string }{
		{"no usage line", "Serve things.\n"},
		{"a flags line that is no flag", "usage: tool x\n\nflags:\n  what is this\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c command
			if err := c.parse(tc.help); err == nil {
				t.Errorf("parse accepted %q: %+v", tc.help, c)
			}
		})
	}
}

func TestZshDescHasNoSpecSyntaxAndIsBounded(t *testing.T) {
	got := zshDesc("HOST:PORT to listen on [default here]. More text after.")
	if strings.ContainsAny(got, "[]:") || strings.Contains(got, "More text") {
		t.Errorf("zshDesc: %q", got)
	}
	if long := zshDesc(strings.Repeat("word ", 50)); len(long) > 100 {
		t.Errorf("zshDesc of 250 characters is %d long", len(long))
	}
}
