package lab

import (
	"crypto/ed25519"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/novox/mesh-host/lab/sim"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Debian's chromium; .ci/run installs it.
const chromiumBin = "/usr/bin/chromium"

// chromiumFlags are the flags the browser runs with: headless, no sandbox (CI runs as root in a
// container), and nothing that reaches out on its own (updates, sync, safe browsing lists).
var chromiumFlags = []string{"headless", "no-sandbox", "disable-gpu", "disable-quic", "no-first-run",
	"disable-background-networking", "disable-component-update", "disable-sync"}

// updateScreenshot, when set (MESH_LAB_SCREENSHOT=1), writes the halted page's screenshot to
// docs/fleet-page.png, the one README shows.
const updateScreenshot = "MESH_LAB_SCREENSHOT"

// Issue 22 §2: a real browser (headless Chromium driven by chromedp) opens `mesh-release web`
// against a lab fleet — an embedded bus, simulated nodes following their signed targets — before
// any rollout; a rollout started with the real controller then advances on screen, its batches'
// bars filling through server-sent events without a reload, until a node of the last batch rolls
// back and the page shows the halt report; the node's page tells its story. Screenshots of each
// step are saved in the test's temp dir (and with MESH_LAB_SCREENSHOT=1 the halted page in
// docs/fleet-page.png).
func TestBrowserWatchesARolloutAdvanceAndHaltOnTheFleetPage(t *testing.T) {
	if _, err := os.Stat(chromiumBin); err != nil {
		meshtest.SkipUnlessCI(t, "%s is not installed (Debian's chromium: apt-get install -y --no-install-recommends chromium; .ci/run installs it): %v", chromiumBin, err)
	}
	if _, ok := tinyRelease("v1.1.0"); !ok {
		t.Skip("the lab's tiny release binary is amd64 machine code")
	}
	ctx := meshtest.Context(t, 90*time.Second)
	b := meshtest.StartBus(t)
	tmp := t.TempDir()
	rel := &Release{Bin: build(t, PkgRelease, "v0.0.0-lab"), KeyDir: filepath.Join(tmp, "keys"), Out: filepath.Join(tmp, "out"), NATS: b.URL()}
	pubText, err := rel.Keygen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	pub, err := wire.ParseTrustedKey(pubText)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"v1.1.0", "v1.2.0"} {
		exe, _ := tinyRelease(v)
		path := filepath.Join(tmp, "mesh-host-"+v)
		if err := os.WriteFile(path, exe, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := rel.Ship(ctx, v, path); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rel.Withdraw(ctx, "v1.2.0", "leaks file descriptors"); err != nil {
		t.Fatal(err)
	}

	// Six nodes: canary 1, then 50% (2 more), then 100% (3 more), one of which rolls back. Their
	// hosts are from before plans, so the batches are exact shares (the page is what is tested).
	nodes := simNodes(6)
	planned := perNodeBatches("v1.1.0", nodes, 1, []int{50, 100})
	failing := planned[2][0]
	fl, err := sim.Start(ctx, sim.Config{
		URLs: []string{b.URL()}, Names: b.Names, Nodes: nodes, Shards: 2, Running: "v1.0.0", Heartbeat: 300 * time.Millisecond,
		StartMin: 300 * time.Millisecond, StartMax: 900 * time.Millisecond, ConfirmAfter: 200 * time.Millisecond,
		Fails:       func(node, version string) bool { return version == "v1.1.0" && node == failing },
		TrustedKeys: []ed25519.PublicKey{pub},
		OldHosts:    func(string) bool { return true },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer fl.Close()

	addr := "127.0.0.1:" + strconv.Itoa(freePorts(t, 1)[0])
	webOut := &meshtest.Buffer{}
	web := exec.CommandContext(ctx, rel.Bin, "web", "--nats", b.URL(), "--listen", addr)
	web.Stdout, web.Stderr = webOut, webOut
	if err := web.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		web.Process.Signal(os.Interrupt)
		web.Wait()
		if t.Failed() {
			t.Logf("mesh-release web said:\n%s", webOut)
		}
	})
	meshtest.Eventually(t, "mesh-release web serves", func() bool { return strings.Contains(get(t, "http://"+addr+"/"), "Fleet: 6 nodes") })

	opts := []chromedp.ExecAllocatorOption{chromedp.ExecPath(chromiumBin), chromedp.UserDataDir(filepath.Join(tmp, "chromium")), chromedp.WindowSize(1280, 1000)}
	for _, f := range chromiumFlags {
		opts = append(opts, chromedp.Flag(f, true))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(ctx, opts...)
	defer cancelAlloc()
	bctx, cancelBrowser := chromedp.NewContext(actx, chromedp.WithLogf(t.Logf))
	defer cancelBrowser()
	shots := t.TempDir()
	shot := func(name string) []byte {
		t.Helper()
		png, err := chromedp.Run(bctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
		return png
	}
	// The page before any rollout; a mark on its window tells whether it was ever reloaded.
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/"), chromedp.WaitVisible(chromedp.ID("rollout-none")),
		chromedp.Evaluate[chromedp.Void](`window.meshLoaded = true; undefined`)); err != nil {
		t.Fatalf("open the page: %v", err)
	}
	shot("1-before")

	ctl := exec.CommandContext(ctx, rel.Bin, "rollout", "start", "v1.1.0", "--nats", b.URL(), "--canary", "1", "--steps", "50%,100%",
		"--window", "30s", "--soak", "2s", "--alive", "10m", "--silent-after", "10s", "--key", rel.KeyPath())
	ctlOut := &meshtest.Buffer{}
	ctl.Stdout, ctl.Stderr = ctlOut, ctlOut
	if err := ctl.Start(); err != nil {
		t.Fatal(err)
	}
	ctlDone := make(chan error, 1)
	go func() { ctlDone <- ctl.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("the controller said:\n%s", ctlOut)
		}
	}()

	// The rollout advances on screen: the canary's bar fills and the next batch starts, pushed to
	// the open page (its mark still there: no reload).
	type bar struct {
		State  string `json:"state"`
		Value  int    `json:"value"`
		Max    int    `json:"max"`
		Loaded bool   `json:"loaded"`
	}
	read := func(id string) bar {
		js := fmt.Sprintf(`(() => { const r = document.getElementById(%q); const p = r && r.querySelector("progress");
			return {state: r ? r.dataset.state : "", value: p ? Number(p.getAttribute("value")) : -1, max: p ? Number(p.getAttribute("max")) : -1, loaded: window.meshLoaded === true}; })()`, id)
		v, err := chromedp.Run(bctx, chromedp.Evaluate[bar](js))
		if err != nil {
			t.Fatalf("read %s: %v", id, err)
		}
		return v
	}
	var b1, b2 bar
	meshtest.EventuallyWithin(t, "the canary batch's bar fills and the 50% batch starts on the open page", 40*time.Second, func() bool {
		b1, b2 = read("batch-1"), read("batch-2")
		return b1.State == "done" && b1.Value == b1.Max && b1.Max == 1 && b2.State != "waiting" && b2.State != ""
	})
	if !b1.Loaded {
		t.Fatal("the page was reloaded: the rollout did not advance through the events")
	}
	shot("2-advancing")

	// The halt: a node of the last batch rolled back; the page shows the report naming it.
	var halt string
	meshtest.EventuallyWithin(t, "the page shows the halt report naming "+failing, 40*time.Second, func() bool {
		halt, _ = chromedp.Run(bctx, chromedp.Evaluate[string](`(() => { const h = document.getElementById("halt"); return h ? h.innerText : ""; })()`))
		return strings.Contains(halt, failing) && strings.Contains(halt, "rolled-back")
	})
	if b3 := read("batch-3"); b3.State != "halted" || !b3.Loaded || b3.Max != 3 {
		t.Errorf("the last batch after the halt: %+v; want halted, of 3, the page never reloaded", b3)
	}
	updates, _ := chromedp.Run(bctx, chromedp.Evaluate[string](`document.body.getAttribute("data-updates") || ""`))
	if n, _ := strconv.Atoi(updates); n < 2 {
		t.Errorf("the page took %q updates; want the events to have redrawn it", updates)
	}
	for _, want := range []string{"v1.2.0", "leaks file descriptors"} {
		w, _ := chromedp.Run(bctx, chromedp.Text(chromedp.ID("withdrawals")))
		if !strings.Contains(w, want) {
			t.Errorf("the withdrawals say %q; want %q", w, want)
		}
	}
	// Without JavaScript (a plain GET, as a browser with scripts off loads it) the same tables.
	if page := get(t, "http://"+addr+"/"); !strings.Contains(page, `id="batch-3" data-state="halted"`) || !strings.Contains(page, `id="halt"`) ||
		!strings.Contains(page, `href="/node/`+failing+`"`) {
		t.Errorf("the page as drawn without JavaScript lacks the halted batch or the report:\n%s", page)
	}
	png := shot("3-halted")
	if os.Getenv(updateScreenshot) == "1" {
		if err := os.WriteFile(filepath.Join(bins.Src, "docs", "fleet-page.png"), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	select {
	case err := <-ctlDone:
		if code := ctl.ProcessState.ExitCode(); code != 3 {
			t.Errorf("the controller exited %d (%v), want 3 (halted)", code, err)
		}
	case <-time.After(30 * time.Second):
		t.Error("the controller did not exit after the halt")
	}

	// The failing node's page: its story, with the rollback.
	if err := chromedp.Do(bctx, chromedp.Navigate("http://"+addr+"/node/"+failing), chromedp.WaitVisible(chromedp.ID("story"))); err != nil {
		t.Fatalf("open %s's page: %v", failing, err)
	}
	story, err := chromedp.Run(bctx, chromedp.Text(chromedp.ID("story")))
	if err != nil {
		t.Fatalf("open %s's page: %v", failing, err)
	}
	if !regexp.MustCompile(`node `+failing+`\n`).MatchString(story) || !strings.Contains(story, "rolled back from v1.1.0") {
		t.Errorf("%s's page does not tell its rollback:\n%s", failing, story)
	}
	shot("4-node")
	t.Logf("screenshots in %s", shots)
}
