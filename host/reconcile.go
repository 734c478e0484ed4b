package host

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// errStopped ends a reconcile between steps when the host is asked to stop.
var errStopped = errors.New("stopped between steps")

// reconcile runs one reconcile, records it in the store and, the first time one completes,
// confirms this version.
func (h *Host) reconcile(ctx context.Context, stop <-chan struct{}, trigger wire.Trigger) {
	began := time.Now()
	id, err := h.store.BeginReconcile(ctx, trigger)
	if err != nil {
		h.log.Error("could not record the reconcile's start; reconciling anyway", "err", err)
	}
	err = h.apply(ctx, stop)
	log := h.log.With("trigger", trigger, "duration", time.Since(began).Round(time.Millisecond))
	// The error is built from the declaration, so it is bounded before it is stored, sent or
	// logged (apply already names only the first failures; this bounds the rest).
	errText := ""
	if err != nil {
		errText = rollback.Cut(err.Error(), wire.MaxErrorBytes)
	}
	if id != 0 {
		if rerr := h.store.EndReconcile(ctx, id, err == nil, errText); rerr != nil {
			log.Error("could not record the reconcile's end", "err", rerr)
		}
	}
	if errors.Is(err, errStopped) {
		log.Info("reconcile stopped between steps")
		return
	}
	if err != nil {
		log.Warn("reconcile completed with errors", "err", errText)
	} else {
		log.Info("reconcile completed")
	}
	// Completing a reconcile confirms the binary even if a resource failed: a failing resource
	// is the machine's problem, not the binary's.
	h.mu.Lock()
	confirmed := h.confirmed
	h.mu.Unlock()
	if !confirmed {
		retired, err := h.records.Confirm(ctx, h.root, h.opts.Version, h.opts.StartID)
		if err != nil {
			h.log.Error("could not confirm this version", "err", err)
			return
		}
		h.mu.Lock()
		h.confirmed = true
		h.mu.Unlock()
		h.log.Info("confirmed", "retired", retired)
	}
}

// apply applies the declaration the host holds, one resource at a time, checking for a stop
// between steps. No declaration held yet is an empty one, which is valid and completes at once.
func (h *Host) apply(ctx context.Context, stop <-chan struct{}) error {
	raw, _, ok, err := h.store.Held(ctx)
	if err != nil {
		return fmt.Errorf("read the held declaration: %w", err)
	}
	if !ok {
		return nil
	}
	decl, err := wire.ParseDeclaration(raw, h.opts.Config.Node)
	if err != nil {
		// Only parsed declarations are held, so this is a store that was edited by hand or a
		// declaration format this version no longer reads.
		return fmt.Errorf("the held declaration no longer parses: %w", err)
	}
	failed := failures{total: len(decl.Resources)}
	for i, r := range decl.Resources {
		select {
		case <-stop:
			return errStopped
		default:
		}
		h.pulse.beat()
		if err := h.applyResource(ctx, r); err != nil {
			failed.add(i, r, err)
		}
	}
	return failed.err()
}

// A declaration may hold many thousands of resources, and every one may fail the same way: the
// reconcile error names the first few and counts the rest, so it stays readable and small.
const (
	maxFailuresNamed = 10  // failures named in a reconcile error
	maxFailureBytes  = 512 // each named failure, cut with rollback.Cut
)

// failures collects a reconcile's failed resources.
type failures struct {
	total int      // resources in the declaration
	count int      // resources that failed
	named []string // the first maxFailuresNamed
}

func (f *failures) add(i int, r wire.Resource, err error) {
	f.count++
	if len(f.named) < maxFailuresNamed {
		f.named = append(f.named, rollback.Cut(fmt.Sprintf("resources[%d] %s %q: %v", i, r.Type, r.ID, err), maxFailureBytes))
	}
}

// err is nil when nothing failed, else "K of N resources failed: first; second; …; and M more".
func (f *failures) err() error {
	if f.count == 0 {
		return nil
	}
	noun := "resources" // "1 of 1 resource", "1 of 3 resources"
	if f.total == 1 {
		noun = "resource"
	}
	text := fmt.Sprintf("%d of %d %s failed: %s", f.count, f.total, noun, strings.Join(f.named, "; "))
	if more := f.count - len(f.named); more > 0 {
		text += fmt.Sprintf("; and %d more", more)
	}
	return errors.New(text)
}

// applyResource applies one resource. The appliers (directory, file, archive, service,
// package, container) are a later issue; until then every resource is reported as not applied
// rather than silently skipped, and the reconcile says so.
func (h *Host) applyResource(ctx context.Context, r wire.Resource) error {
	_ = ctx
	return fmt.Errorf("not applied: this host version has no applier for %q resources yet", r.Type)
}
