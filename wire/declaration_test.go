package wire

import (
	"strings"
	"testing"
)

func TestDeclarationAcceptsEveryLinkKind(t *testing.T) {
	in := `{"version": 1, "node": "n1", "resources": [
		{"type": "directory", "id": "/srv/app", "spec": {"mode": "0755"}},
		{"type": "file", "id": "/srv/app/config", "spec": {"content": ""}},
		{"type": "archive", "id": "/srv/app/static", "spec": {"source": "sha256:` + hex64 + `"}},
		{"type": "service", "id": "app.service", "spec": null},
		{"type": "package", "id": "curl", "spec": {}},
		{"type": "container", "id": "web", "spec": {"image": "nginx@sha256:` + hex64 + `"}},
		{"type": "file", "id": "app", "spec": {"path": "/srv/app/other", "content": "x"}}
	]}`
	d, err := ParseDeclaration([]byte(in), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Resources) != 7 || d.Resources[0].Type != KindDirectory || d.Resources[6].ID != "app" {
		t.Fatalf("resources = %+v", d.Resources)
	}
	if string(d.Resources[3].Spec) != "{}" {
		t.Fatalf("a null spec should read as {}, got %s", d.Resources[3].Spec)
	}
	if string(d.Resources[0].Spec) != `{"mode": "0755"}` {
		t.Fatalf("spec should be kept raw, got %s", d.Resources[0].Spec)
	}
}

func TestDeclarationAcceptsEmptyResources(t *testing.T) {
	d, err := ParseDeclaration([]byte(`{"version":1,"node":"n1","resources":[]}`), "n1")
	if err != nil || len(d.Resources) != 0 {
		t.Fatalf("d=%+v err=%v", d, err)
	}
}

func TestDeclarationRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
	}{
		{"MalformedJSON", `{"version": 1,`, "declaration: unexpected EOF"},
		{"TrailingData", `{"version":1,"node":"n1","resources":[]} {}`, "trailing data"},
		{"UnknownField", `{"version":1,"node":"n1","resources":[],"extra":1}`, `declaration: extra: unknown field`},
		{"UnknownFieldInResource", `{"version":1,"node":"n1","resources":[{"type":"file","id":"a"},{"type":"file","id":"b","mode":1}]}`, `declaration: resources[1].mode: unknown field`},
		{"UnknownVersion", `{"version":2,"node":"n1","resources":[]}`, "version 2 is not supported"},
		{"MissingVersion", `{"node":"n1","resources":[]}`, `no "version"`},
		{"OtherNode", `{"version":1,"node":"n2","resources":[]}`, `addressed to node "n2", but this is node "n1"`},
		{"MissingNode", `{"version":1,"resources":[]}`, `no "node"`},
		{"MissingResources", `{"version":1,"node":"n1"}`, `no "resources"`},
		{"UnknownType", `{"version":1,"node":"n1","resources":[{"type":"directory","id":"/a"},{"type":"directory","id":"/b"},{"type":"fiel","id":"c"}]}`, `declaration: resources[2]: unknown type "fiel"`},
		{"MissingType", `{"version":1,"node":"n1","resources":[{"id":"c"}]}`, `resources[0]: no "type"`},
		{"ActionOverTheLink", `{"version":1,"node":"n1","resources":[{"type":"action","id":"x"}]}`, `only from a local bundle`},
		{"EmptyID", `{"version":1,"node":"n1","resources":[{"type":"file","id":""}]}`, `resources[0]: file has no "id"`},
		{"DuplicateID", `{"version":1,"node":"n1","resources":[{"type":"directory","id":"/a"},{"type":"directory","id":"/a"}]}`, `resources[1]: directory "/a" is already declared at resources[0]`},
		{"SpecNotObject", `{"version":1,"node":"n1","resources":[{"type":"file","id":"a","spec":[1]}]}`, `"spec" must be a JSON object`},
		{"NotAnObject", `[1,2]`, "declaration: json: cannot unmarshal array"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDeclaration([]byte(tc.in), "n1")
			if err == nil {
				t.Fatalf("accepted %s", tc.in)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not contain %q", err, tc.want)
			}
		})
	}
}

func TestDeclarationSameIDDifferentTypesIsFine(t *testing.T) {
	_, err := ParseDeclaration([]byte(`{"version":1,"node":"n1","resources":[{"type":"file","id":"/a","spec":{"content":""}},{"type":"directory","id":"/a"}]}`), "n1")
	if err != nil {
		t.Fatal(err)
	}
}

func TestDeclarationMarshalRoundTrips(t *testing.T) {
	in := Declaration{Version: 1, Node: "n1"}
	out, err := ParseDeclaration(in.Marshal(), "n1")
	if err != nil {
		t.Fatal(err)
	}
	if out.Node != "n1" || len(out.Resources) != 0 {
		t.Fatalf("round trip = %+v", out)
	}
}

func TestValidNode(t *testing.T) {
	for _, tc := range []struct {
		id string
		ok bool
	}{
		{"web-01", true}, {"node_7", true}, {"A9", true},
		{"", false}, {"web.example.com", false}, {"a*", false}, {"a>", false},
		{"a b", false}, {"a/b", false}, {"ä", false}, {strings.Repeat("a", 129), false},
	} {
		err := ValidNode(tc.id)
		if (err == nil) != tc.ok {
			t.Errorf("ValidNode(%q) = %v, want ok=%v", tc.id, err, tc.ok)
		}
	}
}

func TestCheckDeclarationSizeNamesBothSizes(t *testing.T) {
	if err := CheckDeclarationSize(DefaultMaxDeclarationBytes, DefaultMaxDeclarationBytes); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	err := CheckDeclarationSize(1_500_000, DefaultMaxDeclarationBytes)
	if err == nil || err.Error() != "declaration is 1,500,000 bytes, over the 1,048,576-byte limit" {
		t.Fatalf("got %v", err)
	}
	if got := thousands(999); got != "999" {
		t.Fatalf("thousands(999) = %q", got)
	}
	if got := thousands(1000); got != "1,000" {
		t.Fatalf("thousands(1000) = %q", got)
	}
}
