package launcher

import (
	"bytes"
	"errors"
	"maps"
	"reflect"
	"strings"
	"testing"

	"github.com/coreos/go-systemd/v22/journal"
)

type entry struct {
	msg    string
	pri    journal.Priority
	fields map[string]string
}

// Under journald each line of the host's output is an entry of its own that names the host, with
// the priority its level says; the tail for the records is kept as without the journal.
func TestHostLinesGoToTheJournalNamingTheHost(t *testing.T) {
	var got []entry
	send := func(msg string, pri journal.Priority, fields map[string]string) error {
		got = append(got, entry{msg, pri, maps.Clone(fields)})
		return nil
	}
	var stderr bytes.Buffer
	tl := &tail{max: tailLines}
	out := journalLines{send: send, fields: hostFields("v1.2.0", 4242), fallback: &stderr}
	relay(strings.NewReader("time=2026-11-29T10:42:00Z level=INFO msg=linked\ntime=2026-11-29T10:42:01Z level=ERROR msg=\"apply failed\"\npanic: boom\n"), out, tl, nil)

	fields := map[string]string{"SYSLOG_IDENTIFIER": "mesh-host", "SYSLOG_PID": "4242", "MESH_HOST_VERSION": "v1.2.0", "MESH_HOST_PID": "4242"}
	want := []entry{
		{"time=2026-11-29T10:42:00Z level=INFO msg=linked", journal.PriInfo, fields},
		{`time=2026-11-29T10:42:01Z level=ERROR msg="apply failed"`, journal.PriErr, fields},
		{"panic: boom", journal.PriInfo, fields},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("sent\n%+v\nwant\n%+v", got, want)
	}
	if stderr.Len() != 0 {
		t.Errorf("lines also went to stderr: %q", stderr.String())
	}
	if !strings.HasSuffix(tl.String(), "panic: boom") {
		t.Errorf("tail = %q, want the lines kept for the records", tl.String())
	}
}

// A line journald refuses (its socket gone, say) goes to stderr rather than nowhere.
func TestHostLineTheJournalRefusesGoesToStderr(t *testing.T) {
	var stderr bytes.Buffer
	out := journalLines{send: func(string, journal.Priority, map[string]string) error { return errors.New("no journald") }, fallback: &stderr}
	relay(strings.NewReader("hello\n"), out, &tail{max: tailLines}, nil)
	if stderr.String() != "hello\n" {
		t.Errorf("stderr = %q, want the refused line", stderr.String())
	}
}

func TestPriorityReadsSlogsLevel(t *testing.T) {
	for _, tc := range []struct {
		line string
		want journal.Priority
	}{
		{"time=x level=ERROR msg=a", journal.PriErr},
		{"time=x level=WARN msg=a", journal.PriWarning},
		{"time=x level=DEBUG msg=a", journal.PriDebug},
		{"time=x level=INFO msg=a", journal.PriInfo},
		{"time=x msg=\"level=ERROR\"", journal.PriInfo},
		{"panic: level=ERROR", journal.PriInfo},
		{"", journal.PriInfo},
	} {
		if got := priority(tc.line); got != tc.want {
			t.Errorf("priority(%q) = %d, want %d", tc.line, got, tc.want)
		}
	}
}
