package launcher

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// envCaptureChild makes the test binary the delivered launcher image of
// TestADeliveredLauncherThatCannotOpenRecordsLeavesWhyForItsJudge: Run after an exec closes
// every descriptor it was not handed, so it runs in a process of its own.
const envCaptureChild = "MESH_TEST_DELIVERED_LAUNCHER_ROOT"

// A delivered launcher that cannot open records.db ends with an error its caller logs to the
// journal; the floor judging it reads launcher.out, so the error must be there too, or the
// image is judged as one that "crashed, exited, hung or was killed before it said why".
func TestADeliveredLauncherThatCannotOpenRecordsLeavesWhyForItsJudge(t *testing.T) {
	if root := os.Getenv(envCaptureChild); root != "" {
		code, err := Run(context.Background(), Config{Root: root, Logger: slog.New(slog.DiscardHandler), Notifier: &recordingNotifier{}})
		if err == nil {
			os.Exit(0)
		}
		os.Exit(code)
	}
	root := t.TempDir()
	// records.db a directory: it cannot be opened.
	if err := os.Mkdir(filepath.Join(root, "records.db"), 0o700); err != nil {
		t.Fatal(err)
	}
	lock, err := os.OpenFile(filepath.Join(root, "launcher.lock"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer lock.Close()
	h, err := json.Marshal(handover{From: "v1.1.0", To: Version, Trial: true, LockFD: 3})
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestADeliveredLauncherThatCannotOpenRecordsLeavesWhyForItsJudge$")
	cmd.Env = append(os.Environ(), envCaptureChild+"="+root, handoverEnv+"="+string(h))
	cmd.ExtraFiles = []*os.File{lock} // descriptor 3, as the image before hands the lock over
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != 1 {
		t.Fatalf("the delivered image exited %d (%v), want 1:\n%s", code, err, out)
	}
	output, how := lastOutput(root)
	if !strings.HasPrefix(how, "it failed: ") || !strings.Contains(how, "mesh-launcher cannot run") || !strings.Contains(how, "records.db") {
		t.Errorf("judged as %q, want it failed: mesh-launcher cannot run … records.db …\nlauncher.out:\n%s", how, output)
	}
}
