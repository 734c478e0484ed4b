package host

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
	// A window names an IANA zone, and a minimal machine may have no zone database: the host
	// carries its own (about 450 KB), used only when the system's cannot be read.
	_ "time/tzdata"

	"golang.org/x/mod/semver"

	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// The maintenance window this node keeps (decision 0029): it fetches and stages at any time and
// stands aside for a newer version only inside its window, judged by its own clock, so the
// window holds while the node is cut off from the bus and across its restarts (the window is
// kept in ROOT/window.json). A step down (a withdrawal, a version marked bad), a running version
// that is withdrawn, and a target signed urgent never wait.

// WindowFile is where a host keeps the window it accepted, signed as it came: ROOT/window.json.
const WindowFile = "window.json"

// StoreWindowWhat is the kind of signed value the store keeps the window's seq for.
const StoreWindowWhat = "window"

// keptWindow is the window in force: the key it came under, the document, its schedule.
type keptWindow struct {
	Key    string      `json:"key"`
	Window wire.Window `json:"window"`
	spec   wire.WindowSpec
}

// windowInput is what the judgement of a stand-aside needs, apart from the clock.
type windowInput struct {
	kept             *keptWindow
	running, choice  string // the version running and the one Choose names
	urgent           bool   // the target in force for choice is signed urgent
	runningWithdrawn bool
}

// windowVerdict is whether to hold the stand-aside for the window, and what the heartbeat says.
type windowVerdict struct {
	hold  bool
	state *wire.WindowState // nil without a window in force
}

// judgeWindow decides, at now, whether a host running in.running should wait before standing
// aside for in.choice. It holds only for an upgrade, outside the window, without urgency, and
// while the running version is not withdrawn; an expired window is not kept.
func judgeWindow(in windowInput, now time.Time) windowVerdict {
	k := in.kept
	if k == nil {
		return windowVerdict{}
	}
	st := &wire.WindowState{Key: k.Key, Spec: k.spec.String()}
	if k.Window.ExpiredAt(now) {
		at := k.Window.ExpiresAt().UTC()
		st.ExpiredSince = &at
		return windowVerdict{state: st}
	}
	open, occ := k.spec.Judge(now)
	st.Open, st.Opens, st.Closes = open, occ.Opens, occ.Closes
	upgrade := in.choice != "" && in.choice != in.running && semver.Compare(in.choice, in.running) > 0
	if !upgrade || open || in.urgent || in.runningWithdrawn {
		return windowVerdict{state: st}
	}
	st.WaitingFor = in.choice
	st.Waiting = wire.WaitingLine(in.choice, occ.Opens)
	return windowVerdict{hold: true, state: st}
}

// now is the host's clock for windows and targets (Options.Now, else time.Now).
func (h *Host) now() time.Time {
	if h.opts.Now != nil {
		return h.opts.Now()
	}
	return time.Now()
}

// windowInputFor is the judgement's input for choice, from what the host holds now.
func (h *Host) windowInputFor(choice string) windowInput {
	_, withdrawn := h.isWithdrawn(h.opts.Version)
	h.mu.Lock()
	defer h.mu.Unlock()
	in := windowInput{kept: h.window, running: h.opts.Version, choice: choice, runningWithdrawn: withdrawn}
	in.urgent = h.target != nil && h.target.target.Urgent && h.target.target.Version == choice
	return in
}

// holdForWindow judges whether to wait before standing aside for choice; when it holds, it
// arms a recheck for the window's opening, says so once in the log, and leaves the waiting line
// for `mesh-launcher status`.
func (h *Host) holdForWindow(choice string) bool {
	now := h.now()
	v := judgeWindow(h.windowInputFor(choice), now)
	said := ""
	if v.hold {
		said = choice + " " + v.state.Opens.String()
	}
	h.mu.Lock()
	before, written := h.waitingSaid, h.waitWritten
	h.mu.Unlock()
	// The file first, then the heartbeat's state: status never lags the heartbeat.
	if said != before || !written {
		h.writeWaiting(v)
	}
	h.mu.Lock()
	h.lastChoice, h.waitingSaid, h.waitWritten = choice, said, true
	if v.hold {
		h.armWindowTimer(v.state.Opens.Sub(now))
	}
	h.mu.Unlock()
	if v.hold && said != before {
		h.log.Info("staged a newer version; standing aside when the maintenance window opens", "for", choice,
			"window", v.state.Spec, "opens", v.state.Opens.Format(wire.WindowTimeLayout))
		h.heartbeatSoon()
	}
	return v.hold
}

// armWindowTimer rechecks Choose after d (the window's opening), replacing a timer armed before.
// Called with h.mu held.
func (h *Host) armWindowTimer(d time.Duration) {
	if h.windowTimer != nil {
		h.windowTimer.Stop()
	}
	h.windowTimer = time.AfterFunc(max(d, 0), h.recheckSoon)
}

// writeWaiting leaves what the node waits for where `mesh-launcher status` reads it, or removes
// it when it waits for nothing.
func (h *Host) writeWaiting(v windowVerdict) {
	var w *rollback.WindowWait
	if v.hold {
		// Running: until the window opens, a restart runs this version, not the one waited for.
		w = &rollback.WindowWait{Version: v.state.WaitingFor, Opens: v.state.Opens, Window: v.state.Spec, Running: h.opts.Version}
	}
	if err := rollback.WriteWindowWait(h.root, w); err != nil {
		h.log.Warn("could not leave the window wait for mesh-launcher status", "err", err)
	}
}

// windowState is the window for the heartbeat, judged now against the last choice.
func (h *Host) windowState() *wire.WindowState {
	h.mu.Lock()
	choice := h.lastChoice
	h.mu.Unlock()
	return judgeWindow(h.windowInputFor(choice), h.now()).state
}

// windowChanged verifies the window the link reports and, if accepted, keeps it (in memory and
// in ROOT/window.json) and has the host judge its stand-aside again. A refused window leaves the
// one kept before in force; a window deleted on the bus is no longer kept.
func (h *Host) windowChanged(ctx context.Context, ev link.WindowChanged) {
	keep := "the window kept before stays in force"
	if ev.Err != nil {
		h.refuse(ctx, "window", ev.Revision, fmt.Sprintf("%v; %s", ev.Err, keep))
		return
	}
	if ev.Window == nil {
		h.setWindow(nil)
		h.log.Info("no maintenance window: standing aside as soon as a newer version is staged")
		h.recheckSoon()
		return
	}
	k, err := verifyWindow(ev.Key, *ev.Window, h.opts.Config.Node, h.trustNow(), h.now())
	if err != nil {
		h.refuse(ctx, "window", ev.Revision, fmt.Sprintf("%v; %s", err, keep))
		return
	}
	same, err := h.store.AcceptSigned(ctx, StoreWindowWhat, ev.Key, k.Window.Seq, k.Window.Signature)
	switch {
	case errors.Is(err, store.ErrReplay), errors.Is(err, store.ErrSeqReused), errors.Is(err, store.ErrSeqAhead):
		h.refuse(ctx, "window", ev.Revision, fmt.Sprintf("%s refused: %v; %s", ev.Key, err, keep))
		return
	case err != nil && ctx.Err() != nil:
		return
	case err != nil:
		h.refuse(ctx, "window", ev.Revision, fmt.Sprintf("%s not kept: could not check its sequence number: %v; %s", ev.Key, err, keep))
		return
	}
	h.setWindow(k)
	if !same {
		h.log.Info("maintenance window accepted", "key", ev.Key, "window", k.spec.String(), "expires", k.Window.Expires)
	}
	h.recheckSoon()
	h.heartbeatSoon()
}

// verifyWindow checks that w was signed for key as trust requires of the targets role, and
// that it applies to node.
func verifyWindow(key string, w wire.Window, node string, trust wire.Trust, now time.Time) (*keptWindow, error) {
	if err := checkWindow(w, key, trust, now); err != nil {
		return nil, fmt.Errorf("%s refused: %w", key, err)
	}
	if !w.For(key, node) {
		return nil, fmt.Errorf("%s refused: the window does not name this node (%s)", key, node)
	}
	spec, err := w.Spec()
	if err != nil {
		return nil, fmt.Errorf("%s refused: %w", key, err)
	}
	return &keptWindow{Key: key, Window: w, spec: spec}, nil
}

// setWindow puts k in force (nil: none) and keeps it on disk, so that a restart while cut off
// from the bus keeps it too.
func (h *Host) setWindow(k *keptWindow) {
	h.mu.Lock()
	h.window = k
	h.mu.Unlock()
	path := filepath.Join(h.root, WindowFile)
	var err error
	if k == nil {
		if err = os.Remove(path); errors.Is(err, os.ErrNotExist) {
			err = nil
		}
	} else {
		b, _ := json.Marshal(k)
		err = atomicfile.WriteFile(path, b, 0o600)
	}
	if err != nil {
		h.log.Warn("could not keep the maintenance window on disk; it holds until this host stops", "err", err)
	}
}

// loadWindow reads the window kept in ROOT/window.json at start, verified again: a window that
// no longer verifies (the trusted keys changed) is not kept.
func (h *Host) loadWindow() {
	path := filepath.Join(h.root, WindowFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return
	}
	var k keptWindow
	if err == nil {
		err = json.Unmarshal(b, &k)
	}
	var kept *keptWindow
	if err == nil {
		kept, err = verifyWindow(k.Key, k.Window, h.opts.Config.Node, h.trustNow(), h.now())
	}
	if err != nil {
		h.log.Warn("the maintenance window kept on disk is not kept: it is taken from the bus again", "file", path, "err", err)
		return
	}
	h.mu.Lock()
	h.window = kept
	h.mu.Unlock()
}

// stopWindowTimer stops the recheck armed for a window's opening.
func (h *Host) stopWindowTimer() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.windowTimer != nil {
		h.windowTimer.Stop()
	}
}
