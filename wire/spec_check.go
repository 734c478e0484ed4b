package wire

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"path"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"github.com/novox/mesh-host/internal/text"
	"github.com/opencontainers/go-digest"
)

// Each kind's spec is decoded strictly into its type (spec.go) and then checked here, so that an
// applier receives only a spec it can carry out, and a mistake is refused with the whole
// declaration, naming its place (`resources[2].spec.mode: "0999" is not an octal mode like
// "0644"`), before anything is applied.

// Bounds on what a spec may hold, beyond the declaration's own size limit (which bounds content
// and unit files): each is far above any real use and keeps what an error or an argv can carry
// small.
const (
	MaxIDBytes      = 4096 // a resource id
	maxPathBytes    = 4096 // PATH_MAX
	maxElementBytes = 255  // NAME_MAX
	maxUnitBytes    = 255  // systemd's own limit on a unit name
	maxNameBytes    = 255  // a package or container name
	maxArgs         = 1024 // argv entries of a command, verify or container command
	maxListEntries  = 1024 // env, ports, volumes
	maxUserBytes    = 32   // a user or group name (useradd's limit)
)

// unitSuffixes are the unit types a service resource may name: those that can be enabled,
// started and stopped.
var unitSuffixes = []string{".service", ".socket", ".timer", ".path", ".mount", ".target"}

// fieldErr is a refusal at a place inside one resource: at is relative to the resource
// ("spec", "mode" or "id").
type fieldErr struct {
	at  []segment
	err error
}

func (e *fieldErr) Error() string { return withPath(e.err, e.at).Error() }
func (e *fieldErr) Unwrap() error { return e.err }

func key(k string) segment { return segment{key: k, isKey: true} }
func index(i int) segment  { return segment{index: i} }

// refuse builds a fieldErr at spec.<at…>.
func refuse(format string, args ...any) func(at ...segment) *fieldErr {
	return func(at ...segment) *fieldErr {
		return &fieldErr{at: append([]segment{key("spec")}, at...), err: fmt.Errorf(format, args...)}
	}
}

// specCheck is implemented by every spec type.
type specCheck interface {
	// check refuses what the kind's applier could not carry out or must not touch; id is the
	// resource's id (the default of its path, unit or name), root the host's root ("" for
	// DefaultRoot only).
	check(id, root string) *fieldErr
	// fillDefaults sets the fields that default to the resource's id.
	fillDefaults(id string)
}

// newSpec returns a new spec value for kind, or nil for an unknown kind.
func newSpec(kind string) specCheck {
	switch kind {
	case KindDirectory:
		return &DirectorySpec{}
	case KindFile:
		return &FileSpec{}
	case KindArchive:
		return &ArchiveSpec{}
	case KindService:
		return &ServiceSpec{}
	case KindPackage:
		return &PackageSpec{}
	case KindContainer:
		return &ContainerSpec{}
	case KindAction:
		return &ActionSpec{}
	}
	return nil
}

// specType returns kind's spec type (the schema test holds the schema to it).
func specType(kind string) reflect.Type {
	v := newSpec(kind)
	if v == nil {
		return nil
	}
	return reflect.TypeOf(v).Elem()
}

// ParseSpec decodes and checks the spec of one resource of kind typ with identity id exactly as
// the declaration's parsers do (strictly; path, unit or name defaulted to id), for a spec read
// back from the host's store. It returns a *DirectorySpec, *FileSpec, … root is the host's root
// ("" checks DefaultRoot only). The kind "action" is accepted here: whether a source may
// declare actions is the declaration parser's decision, already taken when it was stored.
func ParseSpec(typ, id string, spec []byte, root string) (any, error) {
	return parseSpec(typ, id, spec, root, nil, false)
}

// parseSpec is ParseSpec for the resource at path at of a declaration. valid says spec was cut
// from a document already found valid, so it is not scanned for validity a second time.
func parseSpec(typ, id string, spec []byte, root string, at []segment, valid bool) (any, error) {
	v := newSpec(typ)
	if v == nil {
		return nil, withPath(fmt.Errorf("unknown type %q (one of %s)", text.Bound(typ), kindList()), at)
	}
	if len(spec) == 0 {
		spec = []byte("{}")
	}
	specAt := append(at[:len(at):len(at)], key("spec"))
	if !valid {
		if err := decodeAt(spec, v, nil, refuseUnknown, specAt); err != nil {
			return nil, err
		}
	} else if err := decodeValid(spec, v, specAt); err != nil {
		return nil, err
	}
	if fe := v.check(id, root); fe != nil {
		return nil, withPath(fe.err, append(at[:len(at):len(at)], fe.at...))
	}
	v.fillDefaults(id)
	return v, nil
}

// pathOr returns p, or id when p is empty, with the place it came from.
func pathOr(p, id, field string) (string, []segment) {
	if p == "" {
		return id, []segment{{key: "id", isKey: true}}
	}
	return p, []segment{key("spec"), key(field)}
}

// checkPath refuses a path that is not absolute, too long, or protected (tree: also one above
// a protected path). from says where it came from; for a path defaulted from the id, the
// error says so.
func checkPath(kindName, p string, from []segment, root string, tree bool) *fieldErr {
	at := func(err error) *fieldErr {
		if len(from) == 1 { // the id
			err = fmt.Errorf("%w (%s's path defaults to its id; set spec.path to name another)", err, kindName)
		}
		return &fieldErr{at: from, err: err}
	}
	if len(p) > maxPathBytes {
		return at(fmt.Errorf("path of %d bytes is longer than %d", len(p), maxPathBytes))
	}
	for _, el := range strings.Split(p, "/") {
		if len(el) > maxElementBytes {
			return at(fmt.Errorf("path %q has an element longer than %d bytes", text.Bound(p), maxElementBytes))
		}
	}
	check := CheckManagedPath
	if tree {
		check = CheckManagedTree
	}
	if err := check(p, root); err != nil {
		return at(err)
	}
	return nil
}

// ParseMode reads a declared mode: three or four octal digits ("0644", "755", "1777"), at most
// 0777 plus the sticky bit. It returns the permission bits with fs.ModeSticky for 01000, as
// os.Chmod takes them. setuid and setgid are refused: they hand the owner's (or group's) rights
// to whoever runs the file, a grant a declaration should not make in passing — a program that
// needs them belongs in a package.
func ParseMode(s string) (fs.FileMode, error) {
	if len(s) < 3 || len(s) > 4 || strings.Trim(s, "01234567") != "" {
		return 0, fmt.Errorf("%q is not an octal mode like \"0644\"", text.Bound(s))
	}
	v, _ := strconv.ParseUint(s, 8, 32) // digits checked above
	switch {
	case v&0o4000 != 0:
		return 0, fmt.Errorf("%q sets the setuid bit, which is refused: it would let whoever runs the file act as its owner; ship such a program in a package", s)
	case v&0o2000 != 0:
		return 0, fmt.Errorf("%q sets the setgid bit, which is refused: it would let whoever runs the file act as its group (on a directory, hand its group to everything made in it); ship such a program in a package", s)
	}
	m := fs.FileMode(v & 0o777)
	if v&0o1000 != 0 {
		m |= fs.ModeSticky
	}
	return m, nil
}

// checkMode refuses a mode ParseMode refuses, and the sticky bit on anything but a directory.
func checkMode(mode string, dir bool) *fieldErr {
	if mode == "" {
		return nil
	}
	m, err := ParseMode(mode)
	if err != nil {
		return refuse("%w", err)(key("mode"))
	}
	if !dir && m&fs.ModeSticky != 0 {
		return refuse("%q sets the sticky bit, which means something only on a directory", mode)(key("mode"))
	}
	return nil
}

// checkOwner refuses an owner or group that is neither a user or group name as useradd makes
// them ([a-z_][a-z0-9_-]*, optionally ending in '$', at most 32 bytes) nor a numeric id below
// 4294967295 (which chown reads as "unchanged").
func checkOwner(field, v string) *fieldErr {
	if v == "" || validUserName(v) {
		return nil
	}
	if strings.Trim(v, "0123456789") == "" {
		if n, err := strconv.ParseUint(v, 10, 32); err == nil && n < 1<<32-1 {
			return nil
		}
		return refuse("%q is not a valid numeric id (0 to 4294967294)", text.Bound(v))(key(field))
	}
	return refuse("%q is not a name (lowercase letters, digits, '_' and '-', starting with a letter or '_', at most %d bytes) or a numeric id", text.Bound(v), maxUserBytes)(key(field))
}

func validUserName(v string) bool {
	if len(v) == 0 || len(v) > maxUserBytes {
		return false
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case (c >= '0' && c <= '9' || c == '-') && i > 0:
		case c == '$' && i == len(v)-1 && i > 0:
		default:
			return false
		}
	}
	return true
}

// CheckBlobDigest refuses a source that is not "sha256:" and 64 lowercase hex digits: a blob is
// named by the digest it is verified against, and only sha256 is read.
func CheckBlobDigest(s string) error {
	d, err := digest.Parse(s)
	if err != nil || d.Algorithm() != digest.SHA256 {
		return fmt.Errorf("%q is not a digest like \"sha256:<64 lowercase hex digits>\"", text.Bound(s))
	}
	return nil
}

func checkSource(v string, required bool) *fieldErr {
	if v == "" {
		if required {
			return refuse("a source is required: the digest of the blob (\"sha256:<64 hex>\")")(key("source"))
		}
		return nil
	}
	if err := CheckBlobDigest(v); err != nil {
		return refuse("%w", err)(key("source"))
	}
	return nil
}

// checkArgv refuses an empty argv, an empty program name, a NUL byte (which no exec can carry)
// and more than maxArgs entries.
func checkArgv(field string, argv []string, what string) *fieldErr {
	if len(argv) == 0 {
		return refuse("%s", what)(key(field))
	}
	if len(argv) > maxArgs {
		return refuse("%d arguments, more than %d", len(argv), maxArgs)(key(field))
	}
	if argv[0] == "" {
		return refuse("the program (the first element) is empty")(key(field), index(0))
	}
	for i, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return refuse("contains a NUL byte, which no command line can carry")(key(field), index(i))
		}
	}
	return nil
}

func (s *DirectorySpec) check(id, root string) *fieldErr {
	p, from := pathOr(s.Path, id, "path")
	if fe := checkPath("a directory", p, from, root, false); fe != nil {
		return fe
	}
	if fe := checkMode(s.Mode, true); fe != nil {
		return fe
	}
	if fe := checkOwner("owner", s.Owner); fe != nil {
		return fe
	}
	return checkOwner("group", s.Group)
}

func (s *DirectorySpec) fillDefaults(id string) {
	if s.Path == "" {
		s.Path = id
	}
}

func (s *FileSpec) check(id, root string) *fieldErr {
	p, from := pathOr(s.Path, id, "path")
	if fe := checkPath("a file", p, from, root, false); fe != nil {
		return fe
	}
	switch {
	case s.Content == nil && s.Source == "":
		return refuse("a file needs exactly one of \"content\" (its text) or \"source\" (a blob's digest); it has neither")()
	case s.Content != nil && s.Source != "":
		return refuse("a file needs exactly one of \"content\" or \"source\"; it has both")()
	}
	if fe := checkSource(s.Source, false); fe != nil {
		return fe
	}
	if fe := checkMode(s.Mode, false); fe != nil {
		return fe
	}
	if fe := checkOwner("owner", s.Owner); fe != nil {
		return fe
	}
	return checkOwner("group", s.Group)
}

func (s *FileSpec) fillDefaults(id string) {
	if s.Path == "" {
		s.Path = id
	}
}

func (s *ArchiveSpec) check(id, root string) *fieldErr {
	p, from := pathOr(s.Path, id, "path")
	if fe := checkPath("an archive", p, from, root, true); fe != nil {
		return fe
	}
	if fe := checkSource(s.Source, true); fe != nil {
		return fe
	}
	if fe := checkOwner("owner", s.Owner); fe != nil {
		return fe
	}
	return checkOwner("group", s.Group)
}

func (s *ArchiveSpec) fillDefaults(id string) {
	if s.Path == "" {
		s.Path = id
	}
}

func (s *ServiceSpec) check(id, root string) *fieldErr {
	unit, from := s.Unit, []segment{key("spec"), key("unit")}
	if unit == "" {
		unit, from = id, []segment{key("id")}
	}
	if err := CheckManagedUnit(unit); err != nil {
		return &fieldErr{at: from, err: err}
	}
	if err := ValidUnitName(unit); err != nil {
		return &fieldErr{at: from, err: err}
	}
	switch s.State {
	case "", "running", "stopped":
	default:
		return refuse("%q is not a state: \"running\", \"stopped\", or leave it out to leave the unit as it is", text.Bound(s.State))(key("state"))
	}
	if s.UnitFile != nil {
		switch {
		case *s.UnitFile == "":
			return refuse("unit_file is empty; leave it out to keep the unit file the machine has")(key("unit_file"))
		case strings.IndexByte(*s.UnitFile, 0) >= 0:
			return refuse("unit_file contains a NUL byte")(key("unit_file"))
		}
		if err := CheckManagedPath("/etc/systemd/system/"+unit, root); err != nil {
			return refuse("%w", err)(key("unit_file"))
		}
	}
	return nil
}

func (s *ServiceSpec) fillDefaults(id string) {
	if s.Unit == "" {
		s.Unit = id
	}
}

// ValidUnitName refuses a unit name systemd would not load as a unit a service resource can
// manage: at most 255 bytes of letters, digits and ":-_.\@", a name before a known suffix
// (.service .socket .timer .path .mount .target), and not a template (foo@.service), which
// cannot be started itself.
func ValidUnitName(name string) error {
	if len(name) > maxUnitBytes {
		return fmt.Errorf("unit name of %d bytes is longer than %d", len(name), maxUnitBytes)
	}
	suffix := ""
	for _, s := range unitSuffixes {
		if strings.HasSuffix(name, s) && len(name) > len(s) {
			suffix = s
		}
	}
	if suffix == "" {
		return fmt.Errorf("unit %q has no unit suffix (%s)", text.Bound(name), strings.Join(unitSuffixes, " "))
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte(":-_.\\@", c) >= 0) {
			return fmt.Errorf("unit %q contains %q; a unit name holds letters, digits and \":-_.\\@\"", text.Bound(name), string(rune(c)))
		}
	}
	stem := strings.TrimSuffix(name, suffix)
	if strings.HasPrefix(stem, "-") || strings.HasPrefix(stem, ".") {
		return fmt.Errorf("unit %q starts with %q", text.Bound(name), stem[:1])
	}
	if strings.HasSuffix(stem, "@") {
		return fmt.Errorf("unit %q is a template; name an instance of it, such as %s", text.Bound(name), text.Bound(stem+"name"+suffix))
	}
	return nil
}

func (s *PackageSpec) check(id, _ string) *fieldErr {
	name, from := s.Name, []segment{key("spec"), key("name")}
	if name == "" {
		name, from = id, []segment{key("id")}
	}
	if err := ValidPackageName(name); err != nil {
		return &fieldErr{at: from, err: err}
	}
	if s.Version != "" {
		if err := ValidDebianVersion(s.Version); err != nil {
			return refuse("%w", err)(key("version"))
		}
	}
	return checkSource(s.Source, false)
}

func (s *PackageSpec) fillDefaults(id string) {
	if s.Name == "" {
		s.Name = id
	}
}

// ValidPackageName refuses a name Debian policy (5.6.1) would not give a package: lowercase
// letters, digits, '+', '-' and '.', at least two characters, starting with a letter or digit,
// optionally followed by ":<architecture>".
func ValidPackageName(name string) error {
	pkg, arch, hasArch := strings.Cut(name, ":")
	ok := len(name) <= maxNameBytes && len(pkg) >= 2 && isLowerAlnum(pkg[0])
	for i := 1; ok && i < len(pkg); i++ {
		ok = isLowerAlnum(pkg[i]) || strings.IndexByte("+-.", pkg[i]) >= 0
	}
	if ok && hasArch {
		ok = arch != ""
		for i := 0; ok && i < len(arch); i++ {
			ok = isLowerAlnum(arch[i]) || arch[i] == '-'
		}
	}
	if !ok {
		return fmt.Errorf("%q is not a Debian package name (lowercase letters, digits, '+', '-' and '.', starting with a letter or digit, optionally \":arch\")", text.Bound(name))
	}
	return nil
}

func isLowerAlnum(c byte) bool { return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' }
func isAlnum(c byte) bool      { return isLowerAlnum(c) || c >= 'A' && c <= 'Z' }

// ValidDebianVersion refuses what dpkg would not read as a version (deb-version(7)):
// [epoch:]upstream[-revision], the epoch digits, the upstream version starting with a digit
// and holding letters, digits and ".+~" (and '-' only with a revision, ':' only with an epoch),
// the revision letters, digits and "+.~".
func ValidDebianVersion(v string) error {
	bad := func(why string) error {
		return fmt.Errorf("%q is not a Debian version ([epoch:]upstream[-revision]): %s", text.Bound(v), why)
	}
	if len(v) > maxNameBytes {
		return bad(fmt.Sprintf("longer than %d bytes", maxNameBytes))
	}
	rest := v
	if epoch, after, ok := strings.Cut(v, ":"); ok {
		if epoch == "" || strings.Trim(epoch, "0123456789") != "" {
			return bad("the epoch before ':' must be digits")
		}
		rest = after
	}
	upstream, revision := rest, ""
	if i := strings.LastIndexByte(rest, '-'); i >= 0 {
		upstream, revision = rest[:i], rest[i+1:]
		if revision == "" {
			return bad("the revision after the last '-' is empty")
		}
		for i := 0; i < len(revision); i++ {
			if !isAlnum(revision[i]) && strings.IndexByte("+.~", revision[i]) < 0 {
				return bad(fmt.Sprintf("the revision holds %q", string(rune(revision[i]))))
			}
		}
	}
	if upstream == "" || upstream[0] < '0' || upstream[0] > '9' {
		return bad("the upstream version must start with a digit")
	}
	for i := 0; i < len(upstream); i++ {
		if c := upstream[i]; !isAlnum(c) && strings.IndexByte(".+~-:", c) < 0 {
			return bad(fmt.Sprintf("it holds %q", string(rune(c))))
		}
	}
	return nil
}

func (s *ContainerSpec) check(id, root string) *fieldErr {
	name, from := s.Name, []segment{key("spec"), key("name")}
	if name == "" {
		name, from = id, []segment{key("id")}
	}
	if !validContainerName(name) {
		return &fieldErr{at: from, err: fmt.Errorf("%q is not a container name (letters, digits and \"_.-\", starting with a letter or digit, at most %d bytes)", text.Bound(name), maxNameBytes)}
	}
	if err := CheckPinnedImage(s.Image); err != nil {
		return refuse("%w", err)(key("image"))
	}
	if len(s.Command) > 0 {
		if fe := checkArgv("command", s.Command, ""); fe != nil {
			return fe
		}
	}
	if len(s.Env) > maxListEntries {
		return refuse("%d variables, more than %d", len(s.Env), maxListEntries)(key("env"))
	}
	// In key order, so that the same declaration is always refused with the same words.
	for _, k := range slices.Sorted(maps.Keys(s.Env)) {
		v := s.Env[k]
		if !validEnvKey(k) {
			return refuse("%q is not an environment variable name (letters, digits and '_', not starting with a digit)", text.Bound(k))(key("env"), key(k))
		}
		if strings.IndexByte(v, 0) >= 0 {
			return refuse("contains a NUL byte")(key("env"), key(k))
		}
	}
	if len(s.Ports) > maxListEntries {
		return refuse("%d ports, more than %d", len(s.Ports), maxListEntries)(key("ports"))
	}
	for i, p := range s.Ports {
		if !validPort(p) {
			return refuse("%q is not a port mapping like \"8080:80\", \"127.0.0.1:8080:80/tcp\"", text.Bound(p))(key("ports"), index(i))
		}
	}
	if len(s.Volumes) > maxListEntries {
		return refuse("%d volumes, more than %d", len(s.Volumes), maxListEntries)(key("volumes"))
	}
	for i, v := range s.Volumes {
		if err := checkVolume(v, root); err != nil {
			return refuse("%w", err)(key("volumes"), index(i))
		}
	}
	switch s.Restart {
	case "", "no", "always", "unless-stopped", "on-failure":
	default:
		return refuse("%q is not a restart policy: \"no\", \"always\", \"unless-stopped\" or \"on-failure\"", text.Bound(s.Restart))(key("restart"))
	}
	switch s.Runtime {
	case "", "docker", "podman":
	default:
		return refuse("%q is not a runtime: \"docker\", \"podman\", or leave it out for the one the machine has working", text.Bound(s.Runtime))(key("runtime"))
	}
	return nil
}

func (s *ContainerSpec) fillDefaults(id string) {
	if s.Name == "" {
		s.Name = id
	}
}

func validContainerName(n string) bool {
	if n == "" || len(n) > maxNameBytes || !isAlnum(n[0]) {
		return false
	}
	for i := 1; i < len(n); i++ {
		if !isAlnum(n[i]) && strings.IndexByte("_.-", n[i]) < 0 {
			return false
		}
	}
	return true
}

func validEnvKey(k string) bool {
	if k == "" || len(k) > maxNameBytes || k[0] >= '0' && k[0] <= '9' {
		return false
	}
	for i := 0; i < len(k); i++ {
		if !isAlnum(k[i]) && k[i] != '_' {
			return false
		}
	}
	return true
}

// CheckPinnedImage refuses an image reference not pinned by digest: "name@sha256:<64 hex>"
// (a tag before the digest is allowed and ignored by the runtimes). A tag alone can move, so
// the same declaration could run different code on two machines or on one machine twice.
func CheckPinnedImage(image string) error {
	if image == "" {
		return errors.New("an image is required, pinned by digest: name@sha256:<64 hex>")
	}
	name, dg, pinned := strings.Cut(image, "@")
	if !pinned {
		return fmt.Errorf("image %q must be pinned by digest (%s@sha256:<64 hex>): a tag can move", text.Bound(image), text.Bound(image))
	}
	if err := CheckBlobDigest(dg); err != nil {
		return fmt.Errorf("image %q: %w", text.Bound(image), err)
	}
	if !validImageName(name) {
		return fmt.Errorf("image %q: %q is not an image name like registry.example:5000/team/app[:tag]", text.Bound(image), text.Bound(name))
	}
	return nil
}

// validImageName is a loose reading of the distribution reference grammar: an optional
// registry host[:port], then lowercase path components, then an optional :tag. The runtime
// parses it fully; this keeps flags, spaces and empty parts out of its command line.
func validImageName(n string) bool {
	if n == "" || len(n) > maxNameBytes || !isAlnum(n[0]) {
		return false
	}
	for i := 0; i < len(n); i++ {
		if !isAlnum(n[i]) && strings.IndexByte("._-/:", n[i]) < 0 {
			return false
		}
	}
	return !strings.Contains(n, "//") && !strings.HasSuffix(n, "/") && !strings.HasSuffix(n, ":")
}

// validPort accepts the runtimes' -p forms: [ip:][hostPort:]containerPort[/tcp|udp|sctp], ports
// or ranges; an IPv6 address in brackets.
func validPort(p string) bool {
	if p == "" || len(p) > 128 {
		return false
	}
	if spec, proto, ok := strings.Cut(p, "/"); ok {
		if proto != "tcp" && proto != "udp" && proto != "sctp" {
			return false
		}
		p = spec
	}
	if strings.HasPrefix(p, "[") {
		end := strings.Index(p, "]:")
		if end < 0 || strings.Trim(p[1:end], "0123456789abcdefABCDEF:.") != "" {
			return false
		}
		p = p[end+2:]
	}
	parts := strings.Split(p, ":")
	if len(parts) > 3 {
		return false
	}
	if len(parts) == 3 {
		if ip := parts[0]; ip == "" || strings.Trim(ip, "0123456789.") != "" {
			return false
		}
		parts = parts[1:]
	}
	for i, part := range parts {
		if part == "" && i == 0 && len(parts) == 2 {
			continue // "127.0.0.1::80": a host port the runtime picks
		}
		lo, hi, isRange := strings.Cut(part, "-")
		if !portNumber(lo) || isRange && !portNumber(hi) {
			return false
		}
	}
	return true
}

func portNumber(s string) bool {
	n, err := strconv.ParseUint(s, 10, 16)
	return err == nil && n > 0 && strings.Trim(s, "0123456789") == ""
}

// checkVolume reads "source:destination[:options]": the source an absolute host path (checked
// as a tree: a container may write under it) or a named volume, the destination absolute.
func checkVolume(v, root string) error {
	parts := strings.Split(v, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("%q is not a volume like \"/srv/data:/data\" or \"name:/data:ro\"", text.Bound(v))
	}
	src, dst := parts[0], parts[1]
	switch {
	case strings.HasPrefix(src, "/"):
		if err := CheckManagedTree(src, root); err != nil {
			return err
		}
	case !validContainerName(src):
		return fmt.Errorf("%q: the source %q is neither an absolute host path nor a volume name", text.Bound(v), text.Bound(src))
	}
	if !path.IsAbs(dst) {
		return fmt.Errorf("%q: the destination %q is not an absolute path in the container", text.Bound(v), text.Bound(dst))
	}
	if len(parts) == 3 {
		for _, o := range strings.Split(parts[2], ",") {
			if o == "" || strings.Trim(o, "abcdefghijklmnopqrstuvwxyzZ") != "" {
				return fmt.Errorf("%q: %q is not a volume option (ro, rw, z, Z, …)", text.Bound(v), text.Bound(o))
			}
		}
	}
	return nil
}

func (s *ActionSpec) check(_, _ string) *fieldErr {
	if fe := checkArgv("command", s.Command, "an action needs a command, as a list of program and arguments"); fe != nil {
		return fe
	}
	return checkArgv("verify", s.Verify, "an action needs verify, a command that exits 0 when the action's work is done: the command runs only when verify fails, and verify must pass after it")
}

func (s *ActionSpec) fillDefaults(string) {}
