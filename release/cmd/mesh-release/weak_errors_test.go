package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nkeys"

	"github.com/novox/mesh-host/release/trust"
	"github.com/novox/mesh-host/wire"
)

// The issue: `mesh-release flet` said only that the command is unknown. A name a letter or two
// off the real one is answered with the nearest, for the commands and for each command's
// subcommands; a name far from all of them is not guessed at.
func TestAMistypedCommandSuggestsTheNearest(t *testing.T) {
	for _, tc := range []struct {
		args    []string
		suggest string // "" for no suggestion
	}{
		{[]string{"flet"}, "fleet"},
		{[]string{"fleeet"}, "fleet"},
		{[]string{"rolout", "start", "v1.0.0"}, "rollout"},
		{[]string{"widnow"}, "window"},
		{[]string{"frobnicate"}, ""},
		{[]string{"x"}, ""},
		{[]string{"rollout", "strat"}, "start"},
		{[]string{"window", "shwo"}, "show"},
		{[]string{"blob", "pt"}, "put"},
		{[]string{"rollout", "frobnicate"}, ""},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, out, errOut := runMain(t, nil, tc.args...)
			if code != exitUsage || out != "" {
				t.Fatalf("exit %d, stdout %q; want exit 2 and nothing on stdout", code, out)
			}
			says := strings.Contains(errOut, "did you mean")
			if tc.suggest == "" && says {
				t.Fatalf("stderr %q guesses at a name far from every one", errOut)
			}
			if tc.suggest != "" && !strings.Contains(errOut, "did you mean `"+tc.suggest+"`?") {
				t.Fatalf("stderr %q does not suggest %q", errOut, tc.suggest)
			}
			if strings.Count(errOut, "\n") != 2 {
				t.Fatalf("stderr %q: want the refusal and the --help hint, two lines", errOut)
			}
		})
	}
}

// nodeCreds writes, for the bus whose identities are in data, the .creds of a node user (what
// `mesh-host enrol` writes as node.creds) and of an enrolment token's user.
func nodeCreds(t *testing.T, data string) (node, token string) {
	t.Helper()
	store, err := trust.Ensure(data)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	text, err := store.NodeUser(wire.NamesFor(wire.DefaultPrefix), "web-01", pub)
	if err != nil {
		t.Fatal(err)
	}
	b, err := jwt.FormatUserConfig(text, seed)
	if err != nil {
		t.Fatal(err)
	}
	node = filepath.Join(t.TempDir(), "node.creds")
	tok, _, err := store.TokenUser(wire.NamesFor(wire.DefaultPrefix), time.Now().Add(time.Hour), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	token = filepath.Join(t.TempDir(), "token.creds")
	if err := os.WriteFile(node, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(token, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	return node, token
}

// The issue: a node's node.creds given where the release side's are needed connected, then
// failed with two raw permission violations and a timeout. The credentials are read before
// anything is asked of the bus: a node's or a token's are said not to be admin.creds, naming
// which node's they are and where admin.creds is, at once (within the first request's time,
// not after the bus's timeout).
func TestNodeCredentialsAreSaidNotToBeTheReleaseSides(t *testing.T) {
	data := t.TempDir()
	url, out, _, _ := runServe(t, "--data", data, "--listen", "127.0.0.1:0")
	env := exported(out.String())
	node, token := nodeCreds(t, data)
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"node.creds, fleet", map[string]string{envNATSURL: url, envNATSCA: env[envNATSCA]}, []string{"fleet", "--creds", node},
			[]string{node + " (--creds)", "node web-01", "not the release side's admin.creds", "trust/admin.creds"}},
		{"node.creds from the environment, init", map[string]string{envNATSURL: url, envNATSCA: env[envNATSCA], envNATSCreds: node}, []string{"init"},
			[]string{node + " ($" + envNATSCreds + ")", "node web-01", "not the release side's admin.creds"}},
		{"a token's creds, rollout status", map[string]string{envNATSURL: url, envNATSCA: env[envNATSCA], envNATSCreds: token}, []string{"rollout", "status"},
			[]string{token, "an enrolment token's", "not the release side's admin.creds"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			code, stdout, stderr := runMain(t, tc.env, tc.args...)
			took := time.Since(start)
			if code != exitError || stdout != "" || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d after %v, stdout %q, stderr %q; want exit 1 and one line on stderr", code, took, stdout, stderr)
			}
			rest := stderr
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("after %v, stderr %q does not say %q (in order: %q)", took, stderr, w, tc.want)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// The issue: a credentials or CA file that does not exist was refused without saying who named
// it, when it came from a variable set long ago in another shell. The refusal names the file
// and the flag or variable that gave it.
func TestAMissingCredsOrCAFileNamesWhatNamedIt(t *testing.T) {
	url := freeURL(t, "tls")
	missing := filepath.Join(t.TempDir(), "gone", "admin.creds")
	missingCA := filepath.Join(t.TempDir(), "gone", "ca.pem")
	for _, tc := range []struct {
		name string
		env  map[string]string
		args []string
		want []string
	}{
		{"creds from the flag", nil, []string{"fleet", "--nats", url, "--creds", missing}, []string{missing, "given by --creds", "does not exist"}},
		{"creds from the variable", map[string]string{envNATSURL: url, envNATSCreds: missing}, []string{"fleet"}, []string{missing, "given by $" + envNATSCreds, "does not exist"}},
		{"CA from the flag", nil, []string{"init", "--nats", url, "--ca", missingCA}, []string{missingCA, "given by --ca", "does not exist"}},
		{"CA from the variable", map[string]string{envNATSURL: url, envNATSCA: missingCA}, []string{"rollout", "status"}, []string{missingCA, "given by $" + envNATSCA, "does not exist"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runMain(t, tc.env, tc.args...)
			if code != exitError || stdout != "" || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d, stdout %q, stderr %q; want exit 1 and one line on stderr", code, stdout, stderr)
			}
			rest := stderr
			for _, w := range tc.want {
				i := strings.Index(rest, w)
				if i < 0 {
					t.Fatalf("stderr %q does not say %q (in order: %q)", stderr, w, tc.want)
				}
				rest = rest[i+len(w):]
			}
		})
	}
}

// The distance suggest uses counts a swap of two neighbours as one edit, as a typist makes it.
func TestEditDistanceCountsASwapAsOneEdit(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want int
	}{
		{"fleet", "fleet", 0},
		{"flet", "fleet", 1},
		{"fleeet", "fleet", 1},
		{"widnow", "window", 1},
		{"strat", "start", 1},
		{"pt", "put", 1},
		{"get", "put", 2},
		{"", "ls", 2},
		{"frobnicate", "fleet", 8},
	} {
		if got := editDistance(tc.a, tc.b); got != tc.want {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, got, tc.want)
		}
	}
}
