package host

import (
	"sync"

	"github.com/novox/mesh-host/wire"
)

// weight orders triggers by what they say about the reconcile: when several coalesce, the
// reconcile reports the weightiest (a declaration outranks a reconnect, which outranks the timer).
var weight = map[wire.Trigger]int{wire.TriggerTimer: 1, wire.TriggerReconnect: 2, wire.TriggerStart: 3, wire.TriggerDeclaration: 4}

// triggers coalesces: any number of kicks while a reconcile runs become one more reconcile after
// it. Two reconciles never run at once because only the loop takes from it.
type triggers struct {
	mu      sync.Mutex
	pending wire.Trigger
	ready   chan struct{}
}

func newTriggers() *triggers { return &triggers{ready: make(chan struct{}, 1)} }

func (t *triggers) kick(tr wire.Trigger) {
	t.mu.Lock()
	if weight[tr] > weight[t.pending] {
		t.pending = tr
	}
	t.mu.Unlock()
	select {
	case t.ready <- struct{}{}:
	default:
	}
}

func (t *triggers) take() wire.Trigger {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.pending
	t.pending = ""
	return tr
}
