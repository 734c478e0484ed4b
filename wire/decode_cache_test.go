package wire

import (
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

// The rollout controller parsed every heartbeat by first rebuilding the key maps of Heartbeat
// and each struct inside it: 18% of its CPU at 10,000 nodes. A type's keys are now worked out
// once per process, so two decodes read the very same map. Before, each decode built its own
// (checkKeys made a fresh cache per call).
func TestKeyMapsAreBuiltOncePerTypeNotPerMessage(t *testing.T) {
	hb := Heartbeat{Node: "n1", State: StateRunning, Running: "v1.4.0"}.Marshal()
	for _, typ := range []reflect.Type{reflect.TypeFor[Heartbeat](), reflect.TypeFor[LastReconcile](), reflect.TypeFor[Declaration](), specType(KindFile)} {
		t.Run(typ.Name(), func(t *testing.T) {
			if _, err := ParseHeartbeat(hb); err != nil {
				t.Fatal(err)
			}
			first := (&keyChecker{}).fieldsOf(typ)
			if _, err := ParseHeartbeat(hb); err != nil {
				t.Fatal(err)
			}
			if _, err := ParseDeclaration([]byte(`{"version":1,"node":"n1","resources":[{"type":"file","id":"/a","spec":{"content":"x"}}]}`), "n1"); err != nil {
				t.Fatal(err)
			}
			again := (&keyChecker{}).fieldsOf(typ)
			if len(first) == 0 || reflect.ValueOf(first).UnsafePointer() != reflect.ValueOf(again).UnsafePointer() {
				t.Fatalf("%s's keys were built again (%d keys)", typ, len(first))
			}
		})
	}
}

// The cache is shared by every decode in the process: decodes of many types at once, good and
// bad, each get their own answer (run with -race: a plain map here is a data race).
func TestStrictDecoderIsSafeForConcurrentUse(t *testing.T) {
	type fresh struct { // a type no other test decodes, so the goroutines race to cache it
		A struct {
			B int `json:"b"`
		} `json:"a"`
	}
	cases := []struct {
		decode func() error
		want   string // "" for no error
	}{
		{func() error {
			_, err := ParseHeartbeat(Heartbeat{Node: "n1", State: StateRunning}.Marshal())
			return err
		}, ""},
		{func() error {
			_, err := ParseHeartbeat([]byte(`{"schema":1,"node":"n1","state":"running","last_reconcile":{"ok":true,"OK":false}}`))
			return err
		}, `heartbeat: last_reconcile: "OK" is not a field (did you mean "ok"?)`},
		{func() error { var v fresh; return DecodeStrict([]byte(`{"a":{"b":1}}`), &v) }, ""},
		{func() error { var v fresh; return DecodeStrict([]byte(`{"a":{"c":1}}`), &v) }, "a.c: unknown field"},
		{func() error { var v fresh; return DecodeReport([]byte(`{"a":{"b":1,"b":2}}`), &v) }, `a: duplicate key "b"`},
		{func() error {
			_, err := ParseDeclaration([]byte(`{"version":1,"node":"n1","resources":[{"type":"file","id":"/a","spec":{"Mode":"0644"}}]}`), "n1")
			return err
		}, `declaration: resources[0].spec: "Mode" is not a field (did you mean "mode"?)`},
	}
	var wg sync.WaitGroup
	errs := make(chan string, 8*len(cases))
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				c := cases[(g+i)%len(cases)]
				got := ""
				if err := c.decode(); err != nil {
					got = err.Error()
				}
				if got != c.want {
					errs <- fmt.Sprintf("got %q, want %q", got, c.want)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

// An object's keys are kept in an array while there are at most 16 and in a map past that: a
// duplicate is found on either side of the change and across it.
func TestDuplicateKeysAreFoundInLongAndShortObjects(t *testing.T) {
	obj := func(n int, extra string) string {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf(`"k%02d":%d`, i, i)
		}
		return "{" + strings.Join(append(keys, extra), ",") + "}"
	}
	for _, tc := range []struct {
		name, doc, want string
	}{
		{"TheSecondKeyRepeatsTheFirst", obj(1, `"k00":9`), `duplicate key "k00"`},
		{"TheSixteenthKeyRepeatsTheFirst", obj(15, `"k00":9`), `duplicate key "k00"`},
		{"TheSeventeenthKeyRepeatsTheFirst", obj(16, `"k00":9`), `duplicate key "k00"`},
		{"TheSeventeenthKeyRepeatsTheSixteenth", obj(16, `"k15":9`), `duplicate key "k15"`},
		{"TheEighteenthKeyRepeatsTheSeventeenth", obj(17, `"k16":9`), `duplicate key "k16"`},
		{"AKeyFarPastSixteenRepeatsTheFirst", obj(40, `"k00":9`), `duplicate key "k00"`},
		{"SeventeenDistinctKeys", obj(16, `"k16":9`), ""},
		{"FortyOneDistinctKeys", obj(40, `"k40":9`), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, decode := range []func([]byte, any) error{DecodeStrict, DecodeReport} {
				var v map[string]int
				err := decode([]byte(`{"m":`+tc.doc+`}`), &struct {
					M *map[string]int `json:"m"`
				}{&v})
				got := ""
				if err != nil {
					got = err.Error()
				}
				want := ""
				if tc.want != "" {
					want = "m: " + tc.want
				}
				if got != want {
					t.Fatalf("got %q, want %q", got, want)
				}
			}
		})
	}
}
