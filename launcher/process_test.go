package launcher

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/novox/mesh-host/rollback"
)

func TestHostEnvStripsSystemdAndMeshHostIdentityVariables(t *testing.T) {
	in := []string{
		"PATH=/usr/bin",
		"NOTIFY_SOCKET=/run/systemd/notify",
		"HOME=/root",
		"WATCHDOG_USEC=30000000",
		"WATCHDOG_PID=1",
		"LISTEN_FDS=1",
		"LISTEN_PID=1",
		"LISTEN_FDNAMES=x",
		"MESH_HOST_ROOT=/elsewhere",
		"MESH_HOST_VERSION=v0.0.1",
		"MESH_HOST_START_ID=9",
		"MESH_HOST_RECONCILE_INTERVAL=1s", // a host setting: passed through
		"NOTIFY_SOCKET_EXTRA=kept",        // only exact names are stripped
		"MESH_HOST_ROOTS=kept",
		"EMPTY=",
		"NOEQUALS",
	}
	orig := append([]string(nil), in...)
	got := hostEnv(in)
	want := []string{
		"PATH=/usr/bin",
		"HOME=/root",
		"MESH_HOST_RECONCILE_INTERVAL=1s",
		"NOTIFY_SOCKET_EXTRA=kept",
		"MESH_HOST_ROOTS=kept",
		"EMPTY=",
		"NOEQUALS",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("hostEnv =\n%q\nwant\n%q", got, want)
	}
	if !reflect.DeepEqual(in, orig) {
		t.Errorf("hostEnv changed its input: %q", in)
	}
	if got := hostEnv(nil); len(got) != 0 {
		t.Errorf("hostEnv(nil) = %q", got)
	}
}

func TestTailKeepsTheLastLines(t *testing.T) {
	tests := []struct {
		name  string
		lines int
		want  []string
	}{
		{"none", 0, nil},
		{"fewer than the limit", 3, []string{"line 1", "line 2", "line 3"}},
		{"exactly the limit", tailLines, nil},
		{"more than the limit", 45, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tl := &tail{max: tailLines}
			for i := 1; i <= tt.lines; i++ {
				tl.add(fmt.Sprintf("line %d", i))
			}
			want := tt.want
			if want == nil && tt.lines > 0 {
				for i := max(1, tt.lines-tailLines+1); i <= tt.lines; i++ {
					want = append(want, fmt.Sprintf("line %d", i))
				}
			}
			if got := tl.String(); got != strings.Join(want, "\n") {
				t.Errorf("String() =\n%s\nwant\n%s", got, strings.Join(want, "\n"))
			}
		})
	}
	if tailLines != 20 {
		t.Errorf("tailLines = %d, want 20", tailLines)
	}
}

func TestTailTruncatesLongLines(t *testing.T) {
	tl := &tail{max: tailLines}
	tl.add(strings.Repeat("z", 600))
	tl.add(strings.Repeat("y", 512))
	lines := strings.Split(tl.String(), "\n")
	if len(lines) != 2 {
		t.Fatalf("got %d lines", len(lines))
	}
	if want := strings.Repeat("z", 512) + "…"; lines[0] != want {
		t.Errorf("long line kept as %d bytes, want 512 and an ellipsis", len(lines[0]))
	}
	if lines[1] != strings.Repeat("y", 512) {
		t.Errorf("a line of exactly 512 bytes was changed")
	}
}

func TestTailIsSafeForConcurrentUse(t *testing.T) {
	tl := &tail{max: tailLines}
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 100; i++ {
				tl.add("line")
				_ = tl.String()
			}
		}()
	}
	wg.Wait()
	if n := len(strings.Split(tl.String(), "\n")); n != tailLines {
		t.Errorf("kept %d lines, want %d", n, tailLines)
	}
}

// A host of any version that prints a bus URL with its password (older hosts logged the raw URL)
// leaves the password neither in the launcher's own log nor in the output the records keep.
func TestHostOutputIsPassedOnAndKeptWithBusCredentialsRedacted(t *testing.T) {
	root := t.TempDir()
	bin := rollback.BinaryPath(root, "v1.0.0")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	script := "#!/bin/sh\necho 'level=INFO msg=\"link: connected\" bus=nats://mesh:S3cretPassw0rd@10.0.0.1:4222' >&2\nexit 1\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	passed, err := os.CreateTemp(t.TempDir(), "stderr")
	if err != nil {
		t.Fatal(err)
	}
	defer passed.Close()
	l := &Launcher{cfg: Config{Root: root, Stderr: passed, Stdout: passed}}
	p, err := l.startHost("v1.0.0", 1)
	if err != nil {
		t.Fatal(err)
	}
	<-p.exited
	kept := p.output()
	log, err := os.ReadFile(passed.Name())
	if err != nil {
		t.Fatal(err)
	}
	for what, out := range map[string]string{"kept output": kept, "passed-on log": string(log)} {
		if strings.Contains(out, "S3cretPassw0rd") || !strings.Contains(out, "bus=nats://mesh:xxxxx@10.0.0.1:4222") {
			t.Errorf("%s: %q, want the password redacted and the rest kept", what, out)
		}
	}
}
