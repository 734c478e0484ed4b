package wire

import (
	"bytes"
	"encoding"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/novox/mesh-host/internal/text"
	"io"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// Every document read from the bus or from disk goes through one decoder. encoding/json alone
// matches keys case-insensitively and lets the last of two equal keys win, so
// {"node":"other","Node":"n9"} read as addressed to n9; and encoding/json/v2 needs a
// GOEXPERIMENT. So a pre-pass walks the document beside the Go type it is decoded into and
// refuses, naming the path:
//
//   - a key that appears twice in one object, at any depth (also inside raw specs and inside keys
//     a report's reader does not know);
//   - a key that matches a field of the type only when case is ignored;
//   - with DecodeStrict, a key that is not a field at all. Its key joins the path, so the error
//     reads like the place it names: `resources[3].spec.mode: unknown field`.
//
// Only then does encoding/json decode it, when every key left matches a field exactly.

// unknownKeys says what the pre-pass does with a key that is no field of the type.
type unknownKeys int

const (
	refuseUnknown unknownKeys = iota // an order: a key nobody reads is a mistake
	ignoreUnknown                    // a report: newer writers may add keys
)

// DecodeStrict decodes exactly one JSON document into v, which must be a pointer. Keys must name
// v's fields exactly (json tag names, case-sensitive); unknown keys, duplicate keys at any depth
// and trailing data are refused. The error names where: `resources[3].spec: duplicate key "mode"`,
// `resources[3].spec.mode: unknown field`.
func DecodeStrict(b []byte, v any) error { return decodeAs(b, v, nil, refuseUnknown) }

// DecodeReport is DecodeStrict for reports such as heartbeats: keys the type does not know are
// ignored, but a key matching a field only in another case, or a duplicate key, is refused.
func DecodeReport(b []byte, v any) error { return decodeAs(b, v, nil, ignoreUnknown) }

// decodeAs checks b against shape (v's type when nil) and then decodes it into v. A shape other
// than v's type lets a caller decode into a looser envelope while checking every key against
// the real document type.
func decodeAs(b []byte, v any, shape reflect.Type, unknown unknownKeys) error {
	return decodeAt(b, v, shape, unknown, nil)
}

// decodeAt is decodeAs for a document found at path at inside a larger one (a resource's spec):
// every error names its place from the outer document's top.
func decodeAt(b []byte, v any, shape reflect.Type, unknown unknownKeys, at []segment) error {
	if shape == nil {
		shape = reflect.TypeOf(v)
	}
	if err := checkKeys(b, shape, unknown, at); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if unknown == refuseUnknown {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		return typeError(err, at)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return withPath(errors.New("trailing data after the JSON object"), at)
	}
	return nil
}

// decodeValid is decodeAt with unknown keys refused for a document cut from one json.Valid
// already passed (a resource's spec): no second validity scan.
func decodeValid(b []byte, v any, at []segment) error {
	c := &keyChecker{b: b, unknown: refuseUnknown, path: at[:len(at):len(at)]}
	if err := c.value(reflect.TypeOf(v)); err != nil {
		return err
	}
	// Every key now names a field exactly, so plain decoding reads what the pre-pass checked.
	if err := json.Unmarshal(b, v); err != nil {
		return typeError(err, at)
	}
	return nil
}

// typeError rewords encoding/json's "cannot unmarshal number into Go struct field FileSpec.mode
// of type string" as the place and what was wrong: `resources[3].spec.mode: a JSON number where
// a string belongs`. Other errors are returned as they are, under at.
func typeError(err error, at []segment) error {
	var te *json.UnmarshalTypeError
	if !errors.As(err, &te) || te.Field == "" {
		return withPath(err, at)
	}
	p := append([]segment(nil), at...)
	for _, k := range strings.Split(te.Field, ".") {
		p = append(p, segment{key: k, isKey: true})
	}
	return withPath(fmt.Errorf("a JSON %s where %s belongs", te.Value, goKind(te.Type)), p)
}

// goKind names a Go type in JSON's words.
func goKind(t reflect.Type) string {
	if t == nil {
		return "another value"
	}
	switch t.Kind() {
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "an object"
	case reflect.Pointer:
		return goKind(t.Elem())
	}
	return "another value"
}

// checkKeys is the pre-pass. It reads only documents encoding/json calls valid (one value, no
// trailing data, nested at most 10,000 deep); anything else is left to the decode that follows,
// which refuses it in encoding/json's words.
func checkKeys(b []byte, shape reflect.Type, unknown unknownKeys, at []segment) error {
	if !json.Valid(b) {
		return nil
	}
	c := &keyChecker{b: b, unknown: unknown, path: at[:len(at):len(at)]}
	return c.value(shape)
}

// keyChecker walks a valid JSON document byte by byte (json.Decoder.Token costs an allocation
// per value, which made a 1 MiB declaration five times slower to read).
type keyChecker struct {
	b       []byte
	i       int // the next byte to read
	unknown unknownKeys
	path    []segment // where the value being read is; rendered only for an error
}

// segment is one step of a path: an object key or an array index.
type segment struct {
	key   string
	index int
	isKey bool
}

var (
	jsonUnmarshaler = reflect.TypeFor[json.Unmarshaler]()
	textUnmarshaler = reflect.TypeFor[encoding.TextUnmarshaler]()
)

func (c *keyChecker) space() {
	for c.i < len(c.b) {
		switch c.b[c.i] {
		case ' ', '\t', '\n', '\r':
			c.i++
		default:
			return
		}
	}
}

// value reads one value. t is the Go type it decodes into, or nil where nothing is known about
// its keys (raw JSON, interfaces, custom decoders, keys a report ignores): there only duplicate
// keys are refused.
func (c *keyChecker) value(t reflect.Type) error {
	c.space()
	switch c.b[c.i] {
	case '{':
		c.i++
		return c.object(c.structure(t))
	case '[':
		c.i++
		return c.array(c.structure(t))
	case '"':
		c.skipString()
	default: // a number, true, false or null
		for c.i < len(c.b) && !strings.ContainsRune(",]} \t\n\r", rune(c.b[c.i])) {
			c.i++
		}
	}
	return nil
}

func (c *keyChecker) array(t reflect.Type) error {
	var elem reflect.Type
	if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
		elem = t.Elem()
	}
	c.space()
	if c.b[c.i] == ']' {
		c.i++
		return nil
	}
	for i := 0; ; i++ {
		c.path = append(c.path, segment{index: i})
		if err := c.value(elem); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		c.space()
		c.i++ // ',' or ']'
		if c.b[c.i-1] == ']' {
			return nil
		}
	}
}

func (c *keyChecker) object(t reflect.Type) error {
	var fields map[string]reflect.Type
	if t != nil && t.Kind() == reflect.Struct {
		fields = c.fieldsOf(t)
	}
	c.space()
	if c.b[c.i] == '}' {
		c.i++
		return nil
	}
	var seen keySet
	for {
		c.space()
		key := c.key()
		c.space()
		c.i++ // ':'
		if !seen.add(key) {
			return c.fail(fmt.Errorf("duplicate key %q", text.Bound(key)))
		}
		var next reflect.Type
		switch {
		case t == nil:
		case t.Kind() == reflect.Map:
			next = t.Elem()
		case t.Kind() == reflect.Struct:
			ft, ok := fields[key]
			if ok {
				next = ft
				break
			}
			if near := foldMatch(fields, key); near != "" {
				return c.fail(fmt.Errorf("%q is not a field (did you mean %q?)", key, near))
			}
			if c.unknown == refuseUnknown {
				// The key joins the path: "resources[3].spec.mode: unknown field".
				c.path = append(c.path, segment{key: key, isKey: true})
				return c.fail(errors.New("unknown field"))
			}
		}
		c.path = append(c.path, segment{key: key, isKey: true})
		if err := c.value(next); err != nil {
			return err
		}
		c.path = c.path[:len(c.path)-1]
		c.space()
		c.i++ // ',' or '}'
		if c.b[c.i-1] == '}' {
			return nil
		}
	}
}

// key reads an object key as encoding/json decodes it: escapes resolved and invalid UTF-8
// replaced, so that two keys it would take as one are one here too.
func (c *keyChecker) key() string {
	start := c.i
	c.skipString()
	raw := c.b[start:c.i]
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	var k string
	_ = json.Unmarshal(raw, &k) // valid: json.Valid passed
	return k
}

// skipString moves past the string starting at the current quote.
func (c *keyChecker) skipString() {
	c.i++
	for {
		switch c.b[c.i] {
		case '\\':
			c.i += 2
		case '"':
			c.i++
			return
		default:
			c.i++
		}
	}
}

// keySet is the keys of one object: an array in place while short (most objects have a few
// keys, and a growing slice cost a heartbeat four allocations), a map once long.
type keySet struct {
	n     int
	short [16]string
	m     map[string]bool
}

// add adds k and reports whether it was new.
func (s *keySet) add(k string) bool {
	if s.m != nil {
		if s.m[k] {
			return false
		}
		s.m[k] = true
		return true
	}
	for _, have := range s.short[:s.n] {
		if have == k {
			return false
		}
	}
	if s.n < len(s.short) {
		s.short[s.n] = k
		s.n++
		return true
	}
	s.m = make(map[string]bool, 2*(s.n+1))
	for _, have := range s.short {
		s.m[have] = true
	}
	s.m[k] = true
	return true
}

// What the pre-pass learns of a Go type by reflection (which type's keys matter, and a struct's
// keys) depends on the type alone, so it is worked out once per process, not once per message:
// rebuilding a heartbeat's key maps for every heartbeat was 18% of a rollout controller's CPU
// at 10,000 nodes. These two caches are the one package-level mutable state in wire, and of the
// kind encoding/json keeps itself (its fieldCache, a sync.Map of each type's fields): safe for
// concurrent use, only ever added to, holding nothing but what the type says, so no caller can
// see another's decode through them. A type's entry is never changed once stored, and the maps
// in fieldsCache are read-only; their number is bounded by the types compiled into the binary.
var (
	structureCache sync.Map // reflect.Type → reflect.Type (nil: no keys to check)
	fieldsCache    sync.Map // reflect.Type (a struct) → map[string]reflect.Type, never written after
)

// structure returns the type whose keys matter for t: pointers followed, and nil for a type that
// decodes itself or holds arbitrary JSON.
func (c *keyChecker) structure(t reflect.Type) reflect.Type {
	if t == nil {
		return nil
	}
	if s, ok := structureCache.Load(t); ok {
		s, _ := s.(reflect.Type) // a stored nil is "no keys"
		return s
	}
	s := structureOf(t)
	structureCache.Store(t, s)
	return s
}

// structureOf is structure without the cache.
func structureOf(t reflect.Type) reflect.Type {
	for t != nil && t.Kind() == reflect.Pointer {
		if t.Implements(jsonUnmarshaler) || t.Implements(textUnmarshaler) {
			return nil
		}
		t = t.Elem()
	}
	if t == nil || reflect.PointerTo(t).Implements(jsonUnmarshaler) || reflect.PointerTo(t).Implements(textUnmarshaler) {
		return nil // json.RawMessage, time.Time, config.Duration…
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map, reflect.Slice, reflect.Array:
		return t
	}
	return nil
}

// fieldsOf returns the keys encoding/json reads into struct t, each with its field's type:
// exported fields by tag name or field name, "-" skipped, embedded structs' fields promoted
// (the shallower one winning, as in encoding/json). The map is shared by every decode in the
// process: read it, never write it.
func (c *keyChecker) fieldsOf(t reflect.Type) map[string]reflect.Type {
	if f, ok := fieldsCache.Load(t); ok {
		return f.(map[string]reflect.Type)
	}
	f := make(map[string]reflect.Type)
	addFields(f, map[string]int{}, t, 0, map[reflect.Type]bool{})
	// Two decodes meeting a new type at once both build its map; the first stored is kept, so
	// every later decode reads the same one.
	stored, _ := fieldsCache.LoadOrStore(t, f)
	return stored.(map[string]reflect.Type)
}

func addFields(out map[string]reflect.Type, depthOf map[string]int, t reflect.Type, depth int, visiting map[reflect.Type]bool) {
	if visiting[t] {
		return
	}
	visiting[t] = true
	defer delete(visiting, t)
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				addFields(out, depthOf, et, depth+1, visiting)
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		if d, taken := depthOf[name]; !taken || depth < d {
			out[name], depthOf[name] = sf.Type, depth
		}
	}
}

// foldMatch returns the field key equals when case is ignored the way encoding/json ignores it
// (Unicode simple folding, so "ſ" matches "s"), or "".
func foldMatch(fields map[string]reflect.Type, key string) string {
	best := ""
	for name := range fields {
		if strings.EqualFold(name, key) && (best == "" || name < best) {
			best = name
		}
	}
	return best
}

// fail says err happened at the current path.
func (c *keyChecker) fail(err error) error { return withPath(err, c.path) }

// withPath says err happened at path: resources[3].spec for plain names, ["…"] quoted (and cut
// to 64 bytes) for other keys, so a path is unambiguous, bounded, and a key cannot put control
// characters into an error. A path deeper than 16 steps shows its first and last 8.
func withPath(err error, path []segment) error {
	if len(path) == 0 {
		return err
	}
	return fmt.Errorf("%s: %w", renderPath(path), err)
}

func renderPath(path []segment) string {
	var b strings.Builder
	for i, seg := range path {
		if len(path) > 16 && i == 8 {
			fmt.Fprintf(&b, "…(%d more)…", len(path)-16)
		}
		if len(path) > 16 && i >= 8 && i < len(path)-8 {
			continue
		}
		switch {
		case !seg.isKey:
			b.WriteString("[" + strconv.Itoa(seg.index) + "]")
		case !plainKey(seg.key):
			b.WriteString("[" + strconv.Quote(text.Bound(seg.key)) + "]")
		default:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(seg.key)
		}
	}
	return b.String()
}

func plainKey(key string) bool {
	if key == "" || len(key) > 64 {
		return false
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
