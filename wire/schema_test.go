package wire

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// docs/declaration.schema.json describes the declaration and every kind's spec. These tests keep
// it, the Go types and the examples in docs/wire.md from drifting apart: every example there
// (and every proposed one in testdata/declarations) validates against the schema and parses;
// the schema's properties are the Go types' JSON names.

const schemaFile = "../docs/declaration.schema.json"

func compileSchema(t *testing.T) (*jsonschema.Schema, map[string]any) {
	t.Helper()
	f, err := os.Open(schemaFile)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	if err != nil {
		t.Fatalf("%s: %v", schemaFile, err)
	}
	raw, _ := doc.(map[string]any)
	id, _ := raw["$id"].(string)
	c := jsonschema.NewCompiler()
	if err := c.AddResource(id, doc); err != nil {
		t.Fatal(err)
	}
	sch, err := c.Compile(id)
	if err != nil {
		t.Fatalf("%s does not compile: %v", schemaFile, err)
	}
	return sch, raw
}

// example is one JSON document to check, and where it came from.
type example struct {
	where string
	body  []byte
}

// docExamples returns every ```json block of docs/wire.md's "## Declaration" section, and every
// block elsewhere in it that is a declaration (has "resources" at its top).
func docExamples(t *testing.T) []example {
	t.Helper()
	md, err := os.ReadFile("../docs/wire.md")
	if err != nil {
		t.Fatal(err)
	}
	var out []example
	section := ""
	lines := strings.Split(string(md), "\n")
	for i := 0; i < len(lines); i++ {
		line := lines[i]
		if strings.HasPrefix(line, "## ") {
			section = strings.TrimPrefix(line, "## ")
			continue
		}
		if strings.TrimSpace(line) != "```json" {
			continue
		}
		start := i + 1
		for i++; i < len(lines) && strings.TrimSpace(lines[i]) != "```"; i++ {
		}
		body := []byte(strings.Join(lines[start:i], "\n"))
		var top map[string]json.RawMessage
		isDecl := json.Unmarshal(body, &top) == nil && top["resources"] != nil
		if section == "Declaration" || isDecl {
			out = append(out, example{where: "docs/wire.md:" + strconv.Itoa(start+1) + " (" + section + ")", body: body})
		}
	}
	return out
}

func proposedExamples(t *testing.T) []example {
	t.Helper()
	files, err := filepath.Glob("testdata/declarations/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no proposed examples: %v", err)
	}
	var out []example
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, example{where: "wire/" + f, body: b})
	}
	return out
}

func TestDeclarationExamplesMatchTheSchemaAndParse(t *testing.T) {
	sch, _ := compileSchema(t)
	docs := docExamples(t)
	if len(docs) == 0 {
		t.Fatal(`no json blocks found under docs/wire.md's "## Declaration"`)
	}
	all := append(docs, proposedExamples(t)...)
	all = append(all, example{where: "spec_check_test.go realistic", body: realistic})
	for _, ex := range all {
		t.Run(ex.where, func(t *testing.T) {
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(ex.body))
			if err != nil {
				t.Fatalf("not JSON: %v", err)
			}
			var top struct {
				Node      string          `json:"node"`
				Resources json.RawMessage `json:"resources"`
				Type      string          `json:"type"`
			}
			_ = json.Unmarshal(ex.body, &top)
			body := ex.body
			if top.Resources == nil && top.Type != "" {
				// A single resource shown on its own: checked as a bundle of one.
				body = []byte(`{"version":1,"resources":[` + string(ex.body) + `]}`)
				doc, _ = jsonschema.UnmarshalJSON(bytes.NewReader(body))
			}
			if err := sch.Validate(doc); err != nil {
				t.Errorf("does not match %s: %v", schemaFile, err)
			}
			if _, err := ParseTrustedDeclaration(body, top.Node); err != nil {
				t.Errorf("ParseTrustedDeclaration refuses it: %v", err)
			}
		})
	}
}

// The schema catches what it can say: an editor using it flags these before the parser does.
func TestSchemaRefusesWhatItCanExpress(t *testing.T) {
	sch, _ := compileSchema(t)
	for name, res := range map[string]string{
		"unknown field in a spec":   `{"type":"file","id":"/f","spec":{"content":"","colour":"blue"}}`,
		"unknown field in resource": `{"type":"file","id":"/f","spec":{"content":""},"mode":"0644"}`,
		"file with both":            `{"type":"file","id":"/f","spec":{"content":"","source":"sha256:` + hex64 + `"}}`,
		"file with neither":         `{"type":"file","id":"/f","spec":{}}`,
		"mode not octal":            `{"type":"directory","id":"/d","spec":{"mode":"0999"}}`,
		"setuid":                    `{"type":"file","id":"/f","spec":{"content":"","mode":"4755"}}`,
		"digest uppercase":          `{"type":"archive","id":"/a","spec":{"source":"sha256:` + strings.ToUpper(hex64) + `"}}`,
		"archive without source":    `{"type":"archive","id":"/a"}`,
		"tag-only image":            `{"type":"container","id":"c","spec":{"image":"nginx:1.27"}}`,
		"bad restart":               `{"type":"container","id":"c","spec":{"image":"a@sha256:` + hex64 + `","restart":"sometimes"}}`,
		"bad env key":               `{"type":"container","id":"c","spec":{"image":"a@sha256:` + hex64 + `","env":{"1X":""}}}`,
		"unit without suffix":       `{"type":"service","id":"s","spec":{"unit":"app"}}`,
		"bad state":                 `{"type":"service","id":"s.service","spec":{"state":"started"}}`,
		"package uppercase":         `{"type":"package","id":"p","spec":{"name":"Nginx"}}`,
		"action without verify":     `{"type":"action","id":"a","spec":{"command":["true"]}}`,
		"action empty verify":       `{"type":"action","id":"a","spec":{"command":["true"],"verify":[]}}`,
		"unknown type":              `{"type":"fiel","id":"/f"}`,
		"empty id":                  `{"type":"directory","id":""}`,
	} {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"version":1,"node":"n1","resources":[` + res + `]}`))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if err := sch.Validate(doc); err == nil {
			t.Errorf("%s: the schema accepts %s", name, res)
		}
		if _, err := ParseTrustedDeclaration([]byte(`{"version":1,"node":"n1","resources":[`+res+`]}`), "n1"); err == nil {
			t.Errorf("%s: the parser accepts %s", name, res)
		}
	}
}

// The schema's properties and required lists are the Go types' JSON names and non-omitempty
// fields, for the declaration, a resource and every kind's spec: neither can change alone.
func TestSchemaAndGoTypesAgreeOnFieldNames(t *testing.T) {
	_, raw := compileSchema(t)
	defs, _ := raw["$defs"].(map[string]any)
	check := func(where string, node map[string]any, typ reflect.Type) {
		t.Helper()
		if node == nil {
			t.Errorf("%s: no such schema", where)
			return
		}
		props, _ := node["properties"].(map[string]any)
		var schemaNames []string
		for k := range props {
			schemaNames = append(schemaNames, k)
		}
		var goNames []string
		for i := 0; i < typ.NumField(); i++ {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if name == "-" || !typ.Field(i).IsExported() {
				continue
			}
			goNames = append(goNames, name)
		}
		slices.Sort(schemaNames)
		slices.Sort(goNames)
		if !slices.Equal(schemaNames, goNames) {
			t.Errorf("%s: the schema has properties %v, %s has JSON fields %v", where, schemaNames, typ, goNames)
		}
		if ap, ok := node["additionalProperties"].(bool); !ok || ap {
			t.Errorf("%s: additionalProperties must be false", where)
		}
	}
	check("top level", raw, reflect.TypeFor[Declaration]())
	res, _ := defs["resource"].(map[string]any)
	check("$defs.resource", res, reflect.TypeFor[Resource]())
	enum, _ := res["properties"].(map[string]any)["type"].(map[string]any)["enum"].([]any)
	var schemaKinds []string
	for _, k := range enum {
		schemaKinds = append(schemaKinds, k.(string))
	}
	if !slices.Equal(schemaKinds, kinds) {
		t.Errorf("the schema's kinds %v, the parser's %v", schemaKinds, kinds)
	}
	for _, kind := range kinds {
		spec, _ := defs[kind+"Spec"].(map[string]any)
		check("$defs."+kind+"Spec", spec, specType(kind))
		// Required in the schema is exactly the spec fields the Go type always writes.
		var req []string
		if r, ok := spec["required"].([]any); ok {
			for _, x := range r {
				req = append(req, x.(string))
			}
		}
		var always []string
		typ := specType(kind)
		for i := 0; i < typ.NumField(); i++ {
			name, opts, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			if !strings.Contains(opts, "omitempty") {
				always = append(always, name)
			}
		}
		slices.Sort(req)
		slices.Sort(always)
		if !slices.Equal(req, always) {
			t.Errorf("$defs.%sSpec: required %v, but %s's fields without omitempty are %v", kind, req, typ, always)
		}
	}
	for _, kind := range kinds {
		if specType(kind) == nil {
			t.Errorf("kind %q has no spec type", kind)
		}
	}
}
