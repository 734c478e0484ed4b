package launcher

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
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
