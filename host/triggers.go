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

// triggers coalesces: any number of kicks while a reconcile runs become one more reconcile
// after it, which reports the first trigger that asked for it.
type triggers struct {
	mu      sync.Mutex
	pending Trigger
	ready   chan struct{}
}

func newTriggers() *triggers { return &triggers{ready: make(chan struct{}, 1)} }

func (t *triggers) kick(tr Trigger) {
	t.mu.Lock()
	if t.pending == "" {
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
