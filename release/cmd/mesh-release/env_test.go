package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The issue: `mesh-release rollout resume` without --key printed 48 lines of help. A missing
// --key is one line, for every command that signs, saying why it is needed and that
// MESH_RELEASE_KEY stands in for it; exit 2, before the bus is dialled.
func TestAMissingKeyIsOneLineNamingTheVariable(t *testing.T) {
	out := t.TempDir()
	for _, args := range [][]string{
		{"build"},
		{"build", "--version", "v1.0.0", "-o", out},
		{"target", "--fleet", "v1.0.0"},
		{"target", "web-01", "v1.0.0", "--force"},
		{"rollout", "start", "v1.0.0"},
		{"rollout", "resume"},
		{"rollout", "resume", "--prefix", "mesh"},
		{"rollout", "watch"},
		{"rollout", "abort"},
		{"withdraw", "v1.0.0"},
	} {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			cmd := args[0]
			if cmd == "rollout" {
				cmd += " " + args[1]
			}
			// No bus runs at this URL: the missing key must be said first.
			code, stdout, stderr := runMain(t, map[string]string{envNATSURL: "nats://127.0.0.1:1"}, args...)
			want := "mesh-release " + cmd + ": --key FILE is required"
			if code != exitUsage || stdout != "" || strings.Count(stderr, "\n") != 1 || !strings.HasPrefix(stderr, want) || !strings.Contains(stderr, envReleaseKey) {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit 2 and one line %q… naming %s", code, stdout, stderr, want, envReleaseKey)
			}
		})
	}
}

// MESH_RELEASE_KEY stands in for --key and MESH_RELEASE_DATA for --data, in every command that
// takes them; the flag wins. Each is seen used by the file it names not being there (or not
// being a directory), said before anything else happens.
func TestKeyAndDataComeFromTheEnvironmentAndTheFlagsWin(t *testing.T) {
	dir := t.TempDir()
	envKey, flagKey := filepath.Join(dir, "env.key"), filepath.Join(dir, "flag.key")
	envData, flagData := filepath.Join(dir, "env-data"), filepath.Join(dir, "flag-data")
	// Files, not directories: serve can make neither its data directory.
	notDirs := map[string]string{"env": filepath.Join(dir, "env-file"), "flag": filepath.Join(dir, "flag-file")}
	for _, f := range notDirs {
		if err := os.WriteFile(f, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	serve := []string{"serve", "--listen", "127.0.0.1:0"}
	// Were MESH_RELEASE_DATA not read, serve would make its default directory: take away what
	// this test made there, and fail.
	if _, err := os.Stat(defaultDataDir); os.IsNotExist(err) {
		t.Cleanup(func() {
			if _, err := os.Stat(defaultDataDir); err == nil {
				os.RemoveAll(defaultDataDir)
				t.Errorf("serve made %s: it did not read %s", defaultDataDir, envReleaseData)
			}
		})
	}
	for _, tc := range []struct {
		args     []string
		env      map[string]string
		flag     string // the flag that, added, must win over env
		envSaid  string // what the command says with env alone
		flagSaid string // … and with the flag too
	}{
		{[]string{"build", "--version", "v1.0.0", "-o", dir}, map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{[]string{"target", "--fleet", "v1.0.0"}, map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{[]string{"rollout", "start", "v1.0.0"}, map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{[]string{"rollout", "resume"}, map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{[]string{"rollout", "watch"}, map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{[]string{"rollout", "abort"}, map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{[]string{"withdraw", "v1.0.0"}, map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{append(serve, "--data", t.TempDir()), map[string]string{envReleaseKey: envKey}, "--key=" + flagKey, envKey, flagKey},
		{[]string{"enrol-token"}, map[string]string{envReleaseData: envData}, "--data=" + flagData, "no trust store in " + envData + " (from $" + envReleaseData + ")", "no trust store in " + flagData + " (from --data)"},
		{[]string{"enrol-service"}, map[string]string{envReleaseData: envData}, "--data=" + flagData, "no trust store in " + envData, "no trust store in " + flagData},
		{[]string{"node", "revoke", "n1"}, map[string]string{envReleaseData: envData}, "--data=" + flagData, "no trust store in " + envData, "no trust store in " + flagData},
		{serve, map[string]string{envReleaseData: notDirs["env"]}, "--data=" + notDirs["flag"], notDirs["env"], notDirs["flag"]},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			env := map[string]string{envNATSURL: "nats://127.0.0.1:1"}
			for k, v := range tc.env {
				env[k] = v
			}
			code, _, stderr := runMain(t, env, tc.args...)
			if code != exitError || !strings.Contains(stderr, tc.envSaid) {
				t.Errorf("with %v: exit %d, stderr %q; want exit 1 saying %q", tc.env, code, stderr, tc.envSaid)
			}
			code, _, stderr = runMain(t, env, append(tc.args, tc.flag)...)
			if code != exitError || !strings.Contains(stderr, tc.flagSaid) || strings.Contains(stderr, tc.envSaid) {
				t.Errorf("with %v and %s: exit %d, stderr %q; want exit 1 saying %q, not %q", tc.env, tc.flag, code, stderr, tc.flagSaid, tc.envSaid)
			}
		})
	}
}

// The help of every command that takes --key or --data names the variable that stands in for it.
func TestTheHelpNamesTheKeyAndDataVariables(t *testing.T) {
	for _, args := range [][]string{
		{"build"}, {"target"}, {"withdraw"}, {"serve"}, {"enrol-token"}, {"enrol-service"}, {"node"},
		{"rollout", "start"}, {"rollout", "resume"}, {"rollout", "watch"}, {"rollout", "abort"},
	} {
		code, out, _ := runMain(t, nil, append(args, "--help")...)
		if code != 0 {
			t.Fatalf("%q --help: exit %d", args, code)
		}
		_, env, _ := strings.Cut(out, "\nenvironment (the flags win):\n")
		for flag, name := range map[string]string{"-key": envReleaseKey, "-data": envReleaseData} {
			if strings.Contains(out, "\n  "+flag+" ") && !strings.Contains(env, "  "+name+" ") {
				t.Errorf("%q --help has %s but its environment section does not name %s:\n%s", args, flag, name, out)
			}
		}
	}
	code, out, _ := runMain(t, nil, "--help")
	if code != 0 || !strings.Contains(out, envReleaseKey) || !strings.Contains(out, envReleaseData) {
		t.Errorf("mesh-release --help: exit %d, does not name %s and %s:\n%s", code, envReleaseKey, envReleaseData, out)
	}
}

// The issue: `mesh-release serve: serve: data directory in use`. A command's name is said
// once, whatever the error it reports begins with.
func TestServeSaysItsNameOnce(t *testing.T) {
	data := t.TempDir()
	url, _, _, _ := runServe(t, "--data", data, "--listen", "127.0.0.1:0")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"the data directory in use", []string{"serve", "--data", data, "--listen", "127.0.0.1:0"}, "mesh-release serve: data directory in use: another process"},
		{"the address in use", []string{"serve", "--data", t.TempDir(), "--listen", strings.TrimPrefix(url, "tls://")}, "mesh-release serve: cannot listen on " + strings.TrimPrefix(url, "tls://")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := runMain(t, nil, tc.args...)
			if code != exitError || !strings.HasPrefix(stderr, tc.want) || strings.Contains(stderr, "serve: serve:") {
				t.Errorf("exit %d, stderr %q; want exit 1 and %q…, the command's name once", code, stderr, tc.want)
			}
		})
	}
}
