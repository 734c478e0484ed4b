package host

import "sync"

// Trigger is why a reconcile runs: DESIGN.md's four, and only the timer is a clock.
type Trigger string

const (
	TriggerStart       Trigger = "start"
	TriggerDeclaration Trigger = "declaration"
	TriggerReconnect   Trigger = "reconnect"
	TriggerTimer       Trigger = "timer"
)

// weight orders triggers by what they say about the reconcile: when several coalesce, the
// reconcile reports the weightiest (a declaration outranks a reconnect, which outranks the timer).
var weight = map[Trigger]int{TriggerTimer: 1, TriggerReconnect: 2, TriggerStart: 3, TriggerDeclaration: 4}

// triggers coalesces: any number of kicks while a reconcile runs become one more reconcile after
// it. Two reconciles never run at once because only the loop takes from it.
type triggers struct {
	mu      sync.Mutex
	pending Trigger
	ready   chan struct{}
}

func newTriggers() *triggers { return &triggers{ready: make(chan struct{}, 1)} }

func (t *triggers) kick(tr Trigger) {
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

func (t *triggers) take() Trigger {
	t.mu.Lock()
	defer t.mu.Unlock()
	tr := t.pending
	t.pending = ""
	return tr
}
