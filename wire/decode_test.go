package wire

import (
	"strings"
	"testing"
)

// The case: Go's JSON decoding matched "Node" to the node field, so a declaration
// addressed to "other" was read as addressed to n9. Every document is now decoded
// case-sensitively, with duplicate keys refused at every level.
func TestDocumentsAreDecodedCaseSensitivelyWithDuplicateKeysRefused(t *testing.T) {
	for _, tc := range []struct {
		name  string
		parse func([]byte) error
		in    string
		want  string
	}{
		{"DeclarationNodeInAnotherCase", declFor("n9"), `{"version":1,"node":"other","Node":"n9","resources":[]}`, `"Node" is not a field (did you mean "node"?)`},
		{"DeclarationOnlyNodeInAnotherCase", declFor("n9"), `{"version":1,"NODE":"n9","resources":[]}`, `"NODE" is not a field (did you mean "node"?)`},
		{"DeclarationKeyFoldingToAFieldThroughUnicode", declFor("n9"), "{\"version\":1,\"node\":\"n9\",\"reſources\":[]}", `"reſources" is not a field (did you mean "resources"?)`},
		{"DeclarationDuplicateNode", declFor("n9"), `{"version":1,"node":"other","node":"n9","resources":[]}`, `duplicate key "node"`},
		{"DeclarationDuplicateThroughAnEscape", declFor("n9"), `{"version":1,"node":"other","n\u006fde":"n9","resources":[]}`, `duplicate key "node"`},
		{"ResourceTypeInAnotherCase", declFor("n9"), `{"version":1,"node":"n9","resources":[{"type":"file","id":"a"},{"Type":"file","id":"b"}]}`, `resources[1]: "Type" is not a field (did you mean "type"?)`},
		{"ResourceDuplicateID", declFor("n9"), `{"version":1,"node":"n9","resources":[{"type":"file","id":"a","id":"b"}]}`, `resources[0]: duplicate key "id"`},
		{"SpecDuplicateKey", declFor("n9"), `{"version":1,"node":"n9","resources":[{"type":"file","id":"a"},{"type":"file","id":"b"},{"type":"file","id":"c"},{"type":"directory","id":"d","spec":{"mode":"0755","mode":"0777"}}]}`, `resources[3].spec: duplicate key "mode"`},
		{"SpecNestedDuplicateKey", declFor("n9"), `{"version":1,"node":"n9","resources":[{"type":"file","id":"a","spec":{"x":[{"k":1,"k":2}]}}]}`, `resources[0].spec.x[0]: duplicate key "k"`},
		{"TargetVersionInAnotherCase", func(b []byte) error { _, err := ParseTarget(b); return err }, `{"Version":"v1.0.0"}`, `"Version" is not a field (did you mean "version"?)`},
		{"TargetDuplicateVersion", func(b []byte) error { _, err := ParseTarget(b); return err }, `{"version":"v9.0.0","version":"v1.0.0"}`, `duplicate key "version"`},
		{"ManifestSizeInAnotherCase", func(b []byte) error { _, err := ParseManifest(b); return err }, strings.Replace(string(testManifest().Marshal()), `"size"`, `"Size"`, 1), `"Size" is not a field (did you mean "size"?)`},
		{"ManifestDuplicateDigest", func(b []byte) error { _, err := ParseManifest(b); return err }, strings.Replace(string(testManifest().Marshal()), `"schema": 1,`, `"schema": 1, "schema": 1,`, 1), `duplicate key "schema"`},
		{"HeartbeatNodeInAnotherCase", parseHB, `{"schema":1,"node":"n1","Node":"n2","state":"running"}`, `"Node" is not a field (did you mean "node"?)`},
		{"HeartbeatDuplicateRunning", parseHB, `{"schema":1,"node":"n1","state":"running","running":"v1.0.0","running":"v2.0.0"}`, `duplicate key "running"`},
		{"HeartbeatNestedInAnotherCase", parseHB, `{"schema":1,"node":"n1","state":"running","last_reconcile":{"OK":true}}`, `last_reconcile: "OK" is not a field (did you mean "ok"?)`},
		{"HeartbeatDuplicateInAnUnknownKey", parseHB, `{"schema":1,"node":"n1","state":"running","future":{"a":1,"a":2}}`, `future: duplicate key "a"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.parse([]byte(tc.in))
			if err == nil {
				t.Fatalf("accepted %s", tc.in)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func declFor(node string) func([]byte) error {
	return func(b []byte) error { _, err := ParseDeclaration(b, node); return err }
}

func parseHB(b []byte) error { _, err := ParseHeartbeat(b); return err }

func TestDecodeStrictAcceptsExactKeysAndKeepsUnknownOnesRefused(t *testing.T) {
	var v struct {
		A    int            `json:"a"`
		B    []string       `json:"b,omitempty"`
		M    map[string]int `json:"m"`
		Skip string         `json:"-"`
		Name string
		low  int
	}
	if err := DecodeStrict([]byte(`{"a":1,"b":["x"],"m":{"k":1,"K":2},"Name":"n"}`), &v); err != nil {
		t.Fatal(err)
	}
	if v.A != 1 || v.Name != "n" || v.M["K"] != 2 || v.low != 0 {
		t.Fatalf("decoded %+v", v)
	}
	for in, want := range map[string]string{
		`{"a":1,"c":2}`:                   `c: unknown field`,
		`{"name":"n"}`:                    `"name" is not a field (did you mean "Name"?)`,
		`{"-":"x"}`:                       `-: unknown field`,
		`{"Skip":"x"}`:                    `Skip: unknown field`,
		`{"m":{"k":1,"k":2}}`:             `m: duplicate key "k"`,
		`{"a":1} {"a":2}`:                 "trailing data",
		`{"a":1`:                          "unexpected EOF",
		`{"b":[1,{"x":1,"x":2}]}`:         `b[1]: duplicate key "x"`,
		"{\"m\":{\"k\":1},\"m\":2}":       `duplicate key "m"`,
		"{\"m\":{\"\xff\":1,\"\xfe\":2}}": "m: duplicate key \"\ufffd\"", // encoding/json reads both as U+FFFD
	} {
		if err := DecodeStrict([]byte(in), &v); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("DecodeStrict(%s) = %v, want %q", in, err, want)
		}
	}
}

func TestDecodeReportIgnoresUnknownKeysButNotOtherCases(t *testing.T) {
	var v struct {
		A int `json:"a"`
	}
	if err := DecodeReport([]byte(`{"a":1,"newer":{"x":[1,2]}}`), &v); err != nil || v.A != 1 {
		t.Fatalf("got %+v, %v", v, err)
	}
	if err := DecodeReport([]byte(`{"A":1}`), &v); err == nil || !strings.Contains(err.Error(), `"A" is not a field (did you mean "a"?)`) {
		t.Fatalf("got %v", err)
	}
}

func TestDecodeStrictFollowsEmbeddedStructs(t *testing.T) {
	type Inner struct {
		X int `json:"x"`
	}
	var v struct {
		Inner
		Y int `json:"y"`
	}
	if err := DecodeStrict([]byte(`{"x":1,"y":2}`), &v); err != nil || v.X != 1 || v.Y != 2 {
		t.Fatalf("got %+v, %v", v, err)
	}
	if err := DecodeStrict([]byte(`{"X":1}`), &v); err == nil || !strings.Contains(err.Error(), `did you mean "x"`) {
		t.Fatalf("got %v", err)
	}
}

func TestDecodePathsQuoteKeysThatAreNotPlainNames(t *testing.T) {
	var v struct {
		M map[string]map[string]int `json:"m"`
	}
	err := DecodeStrict([]byte("{\"m\":{\"a.b\\u001b[2J\":{\"k\":1,\"k\":2}}}"), &v)
	if err == nil || err.Error() != `m["a.b\x1b[2J"]: duplicate key "k"` {
		t.Fatalf("got %v", err)
	}
}

// A document nested 1,000,000 deep is refused at encoding/json's own depth, quickly and with a
// short error (the pre-pass must not cost more than the decode it guards).
func TestDecodeRefusesNestingDeeperThanEncodingJSON(t *testing.T) {
	const n = 1_000_000
	b := []byte(`{"version":1,"node":"n1","resources":[{"type":"file","id":"a","spec":{"x":` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}}]}`)
	_, err := ParseDeclaration(b, "n1")
	if err == nil || !strings.Contains(err.Error(), "exceeded max depth") || len(err.Error()) > 200 {
		t.Fatalf("got %v", err)
	}
}

// A path deeper than 16 steps is shown by its first and last 8.
func TestDecodeShortensALongPath(t *testing.T) {
	var v any
	err := DecodeStrict([]byte(strings.Repeat(`{"a":`, 40)+`{"k":1,"k":2}`+strings.Repeat("}", 40)), &v)
	want := "a.a.a.a.a.a.a.a…(24 more)….a.a.a.a.a.a.a.a: duplicate key \"k\""
	if err == nil || err.Error() != want {
		t.Fatalf("got %v, want %s", err, want)
	}
}

// No document makes the decoder panic, and one it accepts has no key twice.
func FuzzDecodeStrict(f *testing.F) {
	for _, s := range []string{`{"version":1,"node":"n1","resources":[{"type":"file","id":"a","spec":{"a":[1,{"b":"\u0062"}]}}]}`,
		`{"a":"\"","a\\":1}`, `[1, -2.5e3, true, null, "x"]`, `{"k":{"k":{}}}`, "\"\\ud800\"", `{"\ud83d\ude00":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var v any
		if err := DecodeStrict(b, &v); err == nil {
			var d Declaration
			_ = DecodeStrict(b, &d)
		}
		_, _ = ParseDeclaration(b, "n1")
		_, _ = ParseHeartbeat(b)
	})
}
