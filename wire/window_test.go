package wire_test

import (
	"crypto/ed25519"
	"errors"
	"strings"
	"testing"
	"time"
	_ "time/tzdata" // the zones, whatever the machine running the tests has

	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

func TestWindowSpecParsesDaysTimesAndZone(t *testing.T) {
	for _, tc := range []struct {
		in       string
		days     string
		start    string
		duration time.Duration
		str      string
	}{
		{"mon-fri 02:00-04:00 Europe/Brussels", "mon,tue,wed,thu,fri", "02:00", 2 * time.Hour, "mon-fri 02:00-04:00 Europe/Brussels"},
		{"daily 22:00-02:00 UTC", "mon,tue,wed,thu,fri,sat,sun", "22:00", 4 * time.Hour, "daily 22:00-02:00 UTC"},
		{"sat,sun 03:30-03:45 America/New_York", "sat,sun", "03:30", 15 * time.Minute, "sat,sun 03:30-03:45 America/New_York"},
		{"fri-mon 00:00-00:00 UTC", "mon,fri,sat,sun", "00:00", 24 * time.Hour, "mon,fri,sat,sun 00:00-00:00 UTC"},
		{"sun,mon-wed 01:00-02:00 Asia/Tokyo", "mon,tue,wed,sun", "01:00", time.Hour, "mon,tue,wed,sun 01:00-02:00 Asia/Tokyo"},
	} {
		t.Run(tc.in, func(t *testing.T) {
			s, err := wire.ParseWindowSpec(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(s.Days, ","); got != tc.days || s.Start != tc.start || s.Duration != tc.duration {
				t.Errorf("days %s start %s duration %s, want %s %s %s", got, s.Start, s.Duration, tc.days, tc.start, tc.duration)
			}
			if s.String() != tc.str {
				t.Errorf("String() = %q, want %q", s.String(), tc.str)
			}
		})
	}
}

func TestWindowSpecRefusesEachWrongPartByName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"mon-fri 02:00-04:00", "want three parts"},
		{"monday 02:00-04:00 UTC", `"monday" is not a day`},
		{"mon-frx 02:00-04:00 UTC", `"mon-frx" is not a day`},
		{"mon 2:00-04:00 UTC", `start "2:00" is not a time of day`},
		{"mon 02:00-24:00 UTC", `end "24:00" is not a time of day`},
		{"mon 02:00+2h UTC", `times "02:00+2h" are not HH:MM-HH:MM`},
		{"mon 02:60-04:00 UTC", `start "02:60"`},
		{"mon 02:00-04:00 Mars/Olympus", `zone "Mars/Olympus" is not an IANA time zone`},
		{"mon 02:00-04:00 Local", `zone "Local"`},
		{"mon 02:00-04:00 " + strings.Repeat("x", 300), "more than the 256"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			_, err := wire.ParseWindowSpec(tc.in)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

// brussels is a time in Europe/Brussels, for the tables below.
func brussels(t *testing.T, s string) time.Time {
	t.Helper()
	loc, err := time.LoadLocation("Europe/Brussels")
	if err != nil {
		t.Fatal(err)
	}
	at, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		t.Fatal(err)
	}
	return at
}

func TestWindowJudgesOpenAndNextOpeningByTheNodesClock(t *testing.T) {
	spec, err := wire.ParseWindowSpec("mon-fri 02:00-04:00 Europe/Brussels")
	if err != nil {
		t.Fatal(err)
	}
	night, err := wire.ParseWindowSpec("daily 23:00-01:00 Europe/Brussels")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		spec         wire.WindowSpec
		now          string
		open         bool
		opens, close string // UTC, RFC 3339
	}{
		{"before it opens on a weekday: today's", spec, "2026-12-02 01:59", false, "2026-12-02T01:00:00Z", "2026-12-02T03:00:00Z"},
		{"the minute it opens: open", spec, "2026-12-02 02:00", true, "2026-12-02T01:00:00Z", "2026-12-02T03:00:00Z"},
		{"inside", spec, "2026-12-02 03:59", true, "2026-12-02T01:00:00Z", "2026-12-02T03:00:00Z"},
		{"the minute it closes: closed, tomorrow's next", spec, "2026-12-02 04:00", false, "2026-12-03T01:00:00Z", "2026-12-03T03:00:00Z"},
		{"friday after it closed: monday's next", spec, "2026-12-04 05:00", false, "2026-12-07T01:00:00Z", "2026-12-07T03:00:00Z"},
		{"saturday inside the hours: closed", spec, "2026-12-05 03:00", false, "2026-12-07T01:00:00Z", "2026-12-07T03:00:00Z"},
		{"past midnight in yesterday's opening", night, "2026-12-03 00:30", true, "2026-12-02T22:00:00Z", "2026-12-03T00:00:00Z"},
		// Europe/Brussels goes from 02:00 CET to 03:00 CEST on 2027-03-28 (a Sunday): the
		// window 02:00-04:00 opens at the first minute that exists, 03:00 CEST, and closes
		// at 04:00 CEST: one hour that night.
		{"spring forward: opens when 02:00 would be, closes at 04:00 CEST", mustSpec(t, "sun 02:00-04:00 Europe/Brussels"), "2027-03-28 01:30", false, "2027-03-28T01:00:00Z", "2027-03-28T02:00:00Z"},
		// 2027-10-31 (a Sunday) goes back from 03:00 CEST to 02:00 CET, so 02:00 happens
		// twice: the window opens at the second (02:00 CET) and closes at 04:00 CET, two
		// hours as on any night.
		{"fall back: opens at the second 02:00, two hours", mustSpec(t, "sun 02:00-04:00 Europe/Brussels"), "2027-10-31 01:30", false, "2027-10-31T01:00:00Z", "2027-10-31T03:00:00Z"},
		{"the week after the change: an hour later in UTC", mustSpec(t, "sun 02:00-04:00 Europe/Brussels"), "2027-03-29 12:00", false, "2027-04-04T00:00:00Z", "2027-04-04T02:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			open, occ := tc.spec.Judge(brussels(t, tc.now))
			if open != tc.open {
				t.Errorf("open = %v, want %v", open, tc.open)
			}
			if got := occ.Opens.UTC().Format(time.RFC3339); got != tc.opens {
				t.Errorf("opens %s, want %s", got, tc.opens)
			}
			if got := occ.Closes.UTC().Format(time.RFC3339); got != tc.close {
				t.Errorf("closes %s, want %s", got, tc.close)
			}
		})
	}
}

func mustSpec(t *testing.T, s string) wire.WindowSpec {
	t.Helper()
	spec, err := wire.ParseWindowSpec(s)
	if err != nil {
		t.Fatal(err)
	}
	return spec
}

func TestWindowSigningTextIsTheDocumentedText(t *testing.T) {
	w := wire.Window{Nodes: []string{"web-01", "web-02"}, Days: []string{"mon", "tue", "wed", "thu", "fri"}, Start: "02:00",
		Duration: "2h0m0s", Zone: "Europe/Brussels", Seq: 1764417600000, Expires: "2027-12-02T03:00:00Z"}
	want := "mesh-host window 1\nkey=window.node.web-01\nnodes=web-01,web-02\ndays=mon,tue,wed,thu,fri\nstart=02:00\nduration=2h0m0s\nzone=Europe/Brussels\nseq=1764417600000\nexpires=2027-12-02T03:00:00Z\n"
	if got := string(w.SigningText(wire.NodeWindowKey("web-01"))); got != want {
		t.Fatalf("signing text:\n%s\nwant:\n%s", got, want)
	}
}

func TestWindowVerifiesOnlyUnderItsKeyUnalteredAndByATrustedKey(t *testing.T) {
	spec := mustSpec(t, "mon-fri 02:00-04:00 Europe/Brussels")
	key := wire.NodeWindowKey("web-01")
	w, err := wire.NewWindow(key, []string{"web-01", "web-02"}, spec, 0, signedAt, 24*time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	trusted := []ed25519.PublicKey{meshtest.ReleaseKey.Public}
	back, err := wire.ParseWindow(w.Marshal())
	if err != nil {
		t.Fatal(err)
	}
	if err := back.Verify(key, wire.LegacyTrust(nil, trusted), time.Now()); err != nil {
		t.Fatalf("the window as signed: %v", err)
	}
	if !back.For(key, "web-01") || back.For(key, "web-03") || back.For(wire.NodeWindowKey("web-02"), "web-01") {
		t.Error("For: a node window applies to the node of its key, when the window names it")
	}
	longer := back
	longer.Duration = "3h0m0s"
	unsigned := back
	unsigned.Signature = ""
	for _, tc := range []struct {
		name string
		w    wire.Window
		key  string
		keys []ed25519.PublicKey
		want error
	}{
		{"moved to another node's key", back, wire.NodeWindowKey("web-02"), trusted, wire.ErrWindowBadSignature},
		{"a field altered", longer, key, trusted, wire.ErrWindowBadSignature},
		{"unsigned", unsigned, key, trusted, wire.ErrWindowUnsigned},
		{"signed by a key not trusted", back, key, []ed25519.PublicKey{meshtest.StrangerKey.Public}, wire.ErrWindowUnknownKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.w.Verify(tc.key, wire.LegacyTrust(nil, tc.keys), time.Now()); !errors.Is(err, tc.want) {
				t.Fatalf("err = %v, want %v", err, tc.want)
			}
		})
	}
}

func TestParseWindowRefusesWhatIsNotAWindow(t *testing.T) {
	ok := `"days":["mon"],"start":"02:00","duration":"2h0m0s","zone":"UTC","seq":1,"expires":"2027-01-01T00:00:00Z","key_id":"","signature":""`
	for _, tc := range []struct{ name, doc, want string }{
		{"an unknown field", `{` + ok + `,"urgent":true}`, "urgent"},
		{"days out of order", strings.Replace(`{`+ok+`}`, `["mon"]`, `["tue","mon"]`, 1), `"mon" comes after "tue"`},
		{"a duration over a day", strings.Replace(`{`+ok+`}`, `"2h0m0s"`, `"25h0m0s"`, 1), "1m to 24h"},
		{"a duration not as Go writes it", strings.Replace(`{`+ok+`}`, `"2h0m0s"`, `"120m"`, 1), "not written as Go writes it"},
		{"a node named twice", `{"nodes":["a","a"],` + ok + `}`, "named twice"},
		{"too large", `{"nodes":["` + strings.Repeat("a", 9000) + `"],` + ok + `}`, "more than the 8192 allowed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := wire.ParseWindow([]byte(tc.doc))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one saying %q", err, tc.want)
			}
		})
	}
}

func TestAnUrgentTargetSignsItsUrgencyAndAPlainOneReadsAsBefore(t *testing.T) {
	tg, err := wire.NewTarget("fleet", "v1.4.0", 0, signedAt, time.Hour, meshtest.ReleaseKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(tg.SigningText("fleet")), "urgent") || strings.Contains(string(tg.Marshal()), "urgent") {
		t.Fatal("a target that is not urgent says urgent")
	}
	tg.Urgent = true
	if err := tg.Sign("fleet", meshtest.ReleaseKey.Private); err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(tg.SigningText("fleet")), "urgent=true\n") {
		t.Fatalf("signing text %q does not end with urgent=true", tg.SigningText("fleet"))
	}
	trusted := []ed25519.PublicKey{meshtest.ReleaseKey.Public}
	if err := tg.Verify("fleet", wire.LegacyTrust(nil, trusted), time.Now()); err != nil {
		t.Fatal(err)
	}
	stripped := tg
	stripped.Urgent = false
	if err := stripped.Verify("fleet", wire.LegacyTrust(nil, trusted), time.Now()); !errors.Is(err, wire.ErrTargetBadSignature) {
		t.Fatalf("urgency removed after signing: err = %v, want a bad signature", err)
	}
}
