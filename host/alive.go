package host

import (
	"io"
	"time"
)

// pulse shows the launcher that this host is alive: a byte on the pipe it handed over
// (MESH_HOST_ALIVE_FD), written from the reconcile loop — between reconciles and between the
// steps of one — so a host that is frozen, deadlocked or stuck in a step shows no life and is
// killed as hung. Nothing listens: it is a pipe to the parent.
type pulse struct {
	w     io.Writer // nil when the launcher gave no pipe (run by hand, or an older launcher)
	every time.Duration
	last  time.Time
}

// beat writes a pulse if one is due. It is called from the loop's goroutine only.
func (p *pulse) beat() {
	if p.w == nil || time.Since(p.last) < p.every {
		return
	}
	p.last = time.Now()
	// A launcher that is gone takes this host with it (Pdeathsig); a failed write changes
	// nothing here.
	p.w.Write([]byte{'.'})
}
