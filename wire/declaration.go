package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/novox/mesh-host/internal/text"
	"reflect"
	"strconv"
	"strings"
)

// DeclarationVersion is the only declaration format this host reads.
const DeclarationVersion = 1

// Resource kinds a declaration may name. KindAction is valid only in a local bundle: the link
// refuses it (docs/design.md, "The host").
const (
	KindDirectory = "directory"
	KindFile      = "file"
	KindArchive   = "archive"
	KindService   = "service"
	KindPackage   = "package"
	KindContainer = "container"
	KindAction    = "action"
)

// DefaultMaxDeclarationBytes is the largest declaration a host accepts and `mesh-release
// declare` sends unless configured otherwise (max_declaration_bytes, --max-bytes), and the
// declarations bucket's max value size: the NATS server's default max payload, 1 MiB.
const DefaultMaxDeclarationBytes = 1 << 20

// CheckDeclarationSize refuses a declaration of size bytes when it is over limit, saying both:
// "declaration is 1,500,000 bytes, over the 1,048,576-byte limit". Callers add which setting
// moves the limit.
func CheckDeclarationSize(size, limit int64) error {
	if size <= limit {
		return nil
	}
	return fmt.Errorf("declaration is %s bytes, over the %s-byte limit", thousands(size), thousands(limit))
}

// thousands writes n with a comma between each group of three digits.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	if neg {
		s = "-" + s
	}
	return s
}

// kinds is every resource kind, in the order the design lists them (docs/design.md).
var kinds = []string{KindDirectory, KindFile, KindArchive, KindService, KindPackage, KindContainer, KindAction}

// Declaration is the value under KV mesh_declarations, key = node id: what one node should hold.
// Resources are applied in order.
type Declaration struct {
	Version   int        `json:"version"`
	Node      string     `json:"node"`
	Resources []Resource `json:"resources"`
}

// Resource is one typed resource with a stable identity.
type Resource struct {
	Type string          `json:"type"`
	ID   string          `json:"id"`
	Spec json.RawMessage `json:"spec"`
	// Parsed is Spec decoded and checked by the declaration's parser: a *DirectorySpec,
	// *FileSpec, *ArchiveSpec, *ServiceSpec, *PackageSpec, *ContainerSpec or *ActionSpec, with
	// the fields that default to the id (path, unit, name) filled in. Spec stays as it was
	// sent: it is what the host records and compares.
	Parsed any `json:"-"`
}

// declarationEnvelope decodes the top level with each resource left raw, so that an error in
// one resource can be reported with its index.
type declarationEnvelope struct {
	Version   *int               `json:"version"`
	Node      *string            `json:"node"`
	Resources *[]json.RawMessage `json:"resources"`
}

// ParseDeclaration decodes a declaration received over the link for node — the link's Parse —
// strictly: unknown fields (at any level, specs included), keys in another case, duplicate
// keys, trailing data, an unknown version or resource type, a declaration addressed to another
// node, an empty, over-long or repeated id, a spec its kind's checks refuse (spec_check.go), a
// path or unit the installation owns (protected.go, checked against DefaultRoot; the host
// checks its configured root with CheckDeclarationPaths), and the kind "action" (never accepted
// over the link) are each refused, and the error names the place:
// `declaration: resources[3].spec.mode: unknown field`.
func ParseDeclaration(b []byte, node string) (Declaration, error) {
	return parseDeclaration(b, node, false)
}

// ParseTrustedDeclaration is ParseDeclaration for a declaration read from a local bundle or
// file (`mesh-host apply`) — ParseTrusted: it also accepts "action", and "node" may be left out
// or "" (the bundle applies to any node); a node it does name must be this one. The permissive
// parser has to be named; the link never calls it.
func ParseTrustedDeclaration(b []byte, node string) (Declaration, error) {
	return parseDeclaration(b, node, true)
}

// ErrOtherNode is what errors.Is finds in the refusal of a declaration addressed to another
// node, so a caller that knows where its node id came from can say so.
var ErrOtherNode = errors.New("declaration addressed to another node")

// otherNode is that refusal: its text is the message alone.
type otherNode string

func (e otherNode) Error() string        { return string(e) }
func (e otherNode) Is(target error) bool { return target == ErrOtherNode }

func parseDeclaration(b []byte, node string, trusted bool) (Declaration, error) {
	var env declarationEnvelope
	// Every key is checked against the declaration itself (resources included), so an error
	// anywhere names its path; the envelope keeps each resource raw for parseResource.
	if err := decodeAs(b, &env, reflect.TypeFor[Declaration](), refuseUnknown); err != nil {
		return Declaration{}, fmt.Errorf("declaration: %w", err)
	}
	switch {
	case env.Version == nil:
		return Declaration{}, fmt.Errorf("declaration: no \"version\" (this host reads version %d)", DeclarationVersion)
	case *env.Version != DeclarationVersion:
		return Declaration{}, fmt.Errorf("declaration: version %d is not supported (this host reads version %d)", *env.Version, DeclarationVersion)
	case trusted && (env.Node == nil || *env.Node == ""):
		// A bundle for any node.
	case env.Node == nil || *env.Node == "":
		return Declaration{}, fmt.Errorf("declaration: no \"node\" (it must name the node it is for, here %q)", node)
	case *env.Node != node && node == "":
		return Declaration{}, fmt.Errorf("declaration: addressed to node %q, but this host has no node id (set node in host.json or MESH_HOST_NODE, or leave \"node\" out of a bundle for any node)", text.Bound(*env.Node))
	case *env.Node != node:
		return Declaration{}, otherNode(fmt.Sprintf("declaration: addressed to node %q, but this is node %q", text.Bound(*env.Node), node))
	}
	if env.Resources == nil {
		return Declaration{}, fmt.Errorf("declaration: no \"resources\" list (use [] to declare nothing)")
	}
	d := Declaration{Version: *env.Version, Resources: make([]Resource, 0, len(*env.Resources))}
	if env.Node != nil {
		d.Node = *env.Node
	}
	seen := make(map[[2]string]int)
	for i, raw := range *env.Resources {
		at := []segment{key("resources"), index(i)}
		r, err := parseResource(raw, trusted, at)
		if err != nil {
			return Declaration{}, fmt.Errorf("declaration: %w", err)
		}
		k := [2]string{r.Type, r.ID}
		if j, dup := seen[k]; dup {
			return Declaration{}, fmt.Errorf("declaration: resources[%d]: %s %q is already declared at resources[%d]; ids are unique per type", i, r.Type, text.Bound(r.ID), j)
		}
		seen[k] = i
		d.Resources = append(d.Resources, r)
	}
	return d, nil
}

// parseResource reads one resource of a declaration whose keys parseDeclaration has already
// checked (every key exact, none twice, none unknown above the spec), then its spec, strictly.
// at is where the resource is (resources[i]).
func parseResource(raw json.RawMessage, trusted bool, at []segment) (Resource, error) {
	var r Resource
	if err := json.Unmarshal(raw, &r); err != nil {
		return Resource{}, typeError(err, at)
	}
	fail := func(format string, args ...any) (Resource, error) {
		return Resource{}, withPath(fmt.Errorf(format, args...), at)
	}
	if !knownKind(r.Type) {
		if r.Type == "" {
			return fail("no \"type\" (one of %s)", kindList())
		}
		return fail("unknown type %q (one of %s)", text.Bound(r.Type), kindList())
	}
	if r.Type == KindAction && !trusted {
		return fail("type %q is accepted only from a local bundle, never over the link", KindAction)
	}
	if r.ID == "" {
		return fail("%s has no \"id\"", r.Type)
	}
	if len(r.ID) > MaxIDBytes {
		return fail("%s id of %d bytes is longer than %d", r.Type, len(r.ID), MaxIDBytes)
	}
	for _, c := range r.ID {
		if c < 0x20 || c == 0x7f {
			return fail("%s id %q contains a control character", r.Type, text.Bound(r.ID))
		}
	}
	spec := bytes.TrimSpace(r.Spec)
	switch {
	case len(spec) == 0 || bytes.Equal(spec, []byte("null")):
		r.Spec = json.RawMessage("{}")
	case spec[0] != '{':
		return fail("%s %q: \"spec\" must be a JSON object", r.Type, text.Bound(r.ID))
	default:
		r.Spec = append(json.RawMessage(nil), spec...)
	}
	parsed, err := parseSpec(r.Type, r.ID, r.Spec, "", at, true)
	if err != nil {
		return Resource{}, err
	}
	r.Parsed = parsed
	return r, nil
}

// CheckDeclarationPaths checks every path and unit of d, already parsed, against the host's
// configured root as well as the protected paths: the parser knows only DefaultRoot, and a host
// run with --root elsewhere owns that directory instead. The host calls it with its root before
// applying; the error names the place as the parser's do.
func CheckDeclarationPaths(d Declaration, root string) error {
	for i, r := range d.Resources {
		// Spec came from a parsed declaration, or was built by a caller: checked in full.
		if _, err := parseSpec(r.Type, r.ID, r.Spec, root, []segment{key("resources"), index(i)}, false); err != nil {
			return fmt.Errorf("declaration: %w", err)
		}
	}
	return nil
}

func knownKind(t string) bool {
	for _, k := range kinds {
		if t == k {
			return true
		}
	}
	return false
}

func kindList() string {
	var b bytes.Buffer
	for i, k := range kinds {
		if k == KindAction {
			continue
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(k)
	}
	return b.String()
}

// Marshal returns the declaration's JSON.
func (d Declaration) Marshal() []byte {
	if d.Resources == nil {
		d.Resources = []Resource{}
	}
	b, _ := json.Marshal(d)
	return b
}

// ValidNode checks that id can name a node on the bus: it is used as a subject token
// (mesh.node.<id>.heartbeat) and in KV keys (node.<id>), so it may hold only ASCII letters,
// digits, '-' and '_' — no dots, wildcards, spaces or slashes — and at most 128 characters.
func ValidNode(id string) error {
	if id == "" {
		return fmt.Errorf("node id is empty; set node in host.json or MESH_HOST_NODE")
	}
	if len(id) > 128 {
		return fmt.Errorf("node id %q is longer than 128 characters", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '-', c == '_':
		default:
			return fmt.Errorf("node id %q contains %q at byte %d; a node id may hold only letters, digits, '-' and '_' (a hostname with dots needs an explicit node id)", id, string(c), i)
		}
	}
	return nil
}
