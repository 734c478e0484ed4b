package launcher

import (
	"encoding/json"
	"os"
	"strings"
	"testing"
)

func TestReadHandover(t *testing.T) {
	good := handover{From: "v1.1.0", To: "v1.2.0", Trial: true, FloorPath: "/usr/bin/mesh-launcher", FloorVersion: "v1.1.0", LockFD: 3,
		Host: &handedHost{PID: 4242, Version: "v2.0.0", Start: 7, StderrFD: 4, AliveFD: 5, SilentNS: -1, Deadline: -1, Tail: []string{"a line"}}}
	js := func(h handover) string {
		b, err := json.Marshal(h)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	with := func(f func(*handover)) string {
		h := good
		host := *good.Host
		h.Host = &host
		f(&h)
		return js(h)
	}
	for _, tc := range []struct {
		name  string
		value *string // nil: the variable is not set
		want  *handover
		says  string // the refusal says it, besides naming the variable
	}{
		{name: "absent: started by the unit, not exec'd", value: nil},
		{name: "a launcher's handover with a host", value: ptr(js(good)), want: &good},
		{name: "a handover without a host (the floor exec'ing before any host)", value: ptr(with(func(h *handover) { h.Host = nil })),
			want: &handover{From: "v1.1.0", To: "v1.2.0", Trial: true, FloorPath: "/usr/bin/mesh-launcher", FloorVersion: "v1.1.0", LockFD: 3}},
		{name: "too long", value: ptr(`{"from":"` + strings.Repeat("v", maxHandover) + `"}`), says: "more than the"},
		{name: "not JSON", value: ptr("lock_fd=3"), says: "invalid character"},
		{name: "empty", value: ptr(""), says: "unexpected end of JSON input"},
		{name: "JSON null", value: ptr("null"), says: "cannot be a launcher's"},
		{name: "the lock on stdin", value: ptr(with(func(h *handover) { h.LockFD = 0 })), says: "cannot be a launcher's"},
		{name: "the lock on stderr", value: ptr(with(func(h *handover) { h.LockFD = 2 })), says: "cannot be a launcher's"},
		{name: "a host pid of 0", value: ptr(with(func(h *handover) { h.Host.PID = 0 })), says: "cannot be a launcher's"},
		{name: "a negative host pid", value: ptr(with(func(h *handover) { h.Host.PID = -1 })), says: "cannot be a launcher's"},
		{name: "the host's stderr on stdout", value: ptr(with(func(h *handover) { h.Host.StderrFD = 1 })), says: "cannot be a launcher's"},
		{name: "the host's liveness pipe on stdin", value: ptr(with(func(h *handover) { h.Host.AliveFD = 0 })), says: "cannot be a launcher's"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(handoverEnv, "")
			if tc.value == nil {
				os.Unsetenv(handoverEnv)
			} else {
				os.Setenv(handoverEnv, *tc.value)
			}
			h, err := readHandover()
			if _, still := os.LookupEnv(handoverEnv); still {
				t.Errorf("%s is still set: a host or launcher started next would inherit it", handoverEnv)
			}
			if tc.says != "" {
				if err == nil || h != nil {
					t.Fatalf("= %+v, %v; want refused", h, err)
				}
				if !strings.Contains(err.Error(), handoverEnv) || !strings.Contains(err.Error(), tc.says) {
					t.Errorf("refused with %q; want it to name %s and say %q", err, handoverEnv, tc.says)
				}
				if len(err.Error()) > 512 {
					t.Errorf("the refusal is %d bytes: unbounded", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (h == nil) != (tc.want == nil) || (h != nil && js(*h) != js(*tc.want)) {
				t.Errorf("= %+v, want %+v", h, tc.want)
			}
		})
	}
}
