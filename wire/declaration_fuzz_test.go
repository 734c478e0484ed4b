package wire

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"unicode/utf8"
)

// maxParseErrorBytes bounds any error either parser returns, whatever the input: an error goes
// into a heartbeat's refused.error (MaxErrorBytes) and onto an operator's terminal.
const maxParseErrorBytes = 2048

// FuzzParseDeclaration feeds both parsers anything. Invariants: neither panics; an error is
// valid UTF-8 and at most maxParseErrorBytes; a declaration accepted re-marshals and re-parses
// to the same resources (type, id, spec, parsed spec); the link's parser never accepts what the
// trusted one refuses, nor an action. The seed corpus is testdata/fuzz/FuzzParseDeclaration
// (every kind, protected paths, unicode and long keys, deep nesting) plus the examples.
// `make test` runs it for a bounded time.
func FuzzParseDeclaration(f *testing.F) {
	f.Add(realistic)
	files, _ := filepath.Glob("testdata/declarations/*.json")
	for _, file := range files {
		if b, err := os.ReadFile(file); err == nil {
			f.Add(b)
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		link, linkErr := ParseDeclaration(b, "web-01")
		checkParsed(t, "ParseDeclaration", b, link, linkErr, func(b []byte) (Declaration, error) { return ParseDeclaration(b, "web-01") })
		trusted, trustedErr := ParseTrustedDeclaration(b, "web-01")
		checkParsed(t, "ParseTrustedDeclaration", b, trusted, trustedErr, func(b []byte) (Declaration, error) { return ParseTrustedDeclaration(b, "web-01") })
		if linkErr == nil {
			if trustedErr != nil {
				t.Fatalf("the link's parser accepts what the trusted one refuses: %v", trustedErr)
			}
			for i, r := range link.Resources {
				if r.Type == KindAction {
					t.Fatalf("the link's parser accepted an action at resources[%d]", i)
				}
			}
		}
	})
}

func checkParsed(t *testing.T, name string, in []byte, d Declaration, err error, parse func([]byte) (Declaration, error)) {
	t.Helper()
	if err != nil {
		msg := err.Error()
		if len(msg) > maxParseErrorBytes {
			t.Fatalf("%s: an error of %d bytes, over %d: %.300q…", name, len(msg), maxParseErrorBytes, msg)
		}
		if !utf8.ValidString(msg) {
			t.Fatalf("%s: an error that is not valid UTF-8: %q", name, msg)
		}
		return
	}
	again, err := parse(d.Marshal())
	if err != nil {
		t.Fatalf("%s accepted %q but refuses its own re-marshalled form %q: %v", name, in, d.Marshal(), err)
	}
	if again.Version != d.Version || again.Node != d.Node || len(again.Resources) != len(d.Resources) {
		t.Fatalf("%s: re-parsed as %+v, first %+v", name, again, d)
	}
	for i, r := range d.Resources {
		a := again.Resources[i]
		if a.Type != r.Type || a.ID != r.ID || !reflect.DeepEqual(a.Parsed, r.Parsed) || !sameJSON(r.Spec, a.Spec) {
			t.Fatalf("%s: resources[%d] re-parsed as %s %q %s %#v, first %s %q %s %#v", name, i, a.Type, a.ID, a.Spec, a.Parsed, r.Type, r.ID, r.Spec, r.Parsed)
		}
	}
}

// sameJSON reports whether a and b decode to the same value (Marshal compacts and escapes a
// raw spec, so its bytes may differ).
func sameJSON(a, b []byte) bool {
	var va, vb any
	if json.Unmarshal(a, &va) != nil || json.Unmarshal(b, &vb) != nil {
		return false
	}
	return reflect.DeepEqual(va, vb)
}
