package launcher

import (
	"context"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify messages. Outside systemd (no NOTIFY_SOCKET) they go nowhere.
type Notifier interface{ Notify(state string) }

// NopNotifier drops every message.
type NopNotifier struct{}

// Notify does nothing.
func (NopNotifier) Notify(string) {}

// SystemdNotifier sends to systemd when NOTIFY_SOCKET is set, and does nothing otherwise.
type SystemdNotifier struct{}

// Notify sends one state line; errors are ignored, as sd_notify's are.
func (SystemdNotifier) Notify(state string) { daemon.SdNotify(false, state) }

// startWatchdog relays WATCHDOG=1 at half the unit's WatchdogSec while the launcher runs. The
// host is a child and cannot notify systemd itself (NotifyAccess=main).
func startWatchdog(ctx context.Context, n Notifier) (stop func()) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil || interval <= 0 {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(interval / 2)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				n.Notify(daemon.SdNotifyWatchdog)
			}
		}
	}()
	return cancel
}
