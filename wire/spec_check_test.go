package wire

import (
	"errors"
	"fmt"
	"io/fs"
	"reflect"
	"strings"
	"testing"
)

const hex64 = "3f4d8c1b2a0e9f7d6c5b4a39281706f5e4d3c2b1a0f9e8d7c6b5a4938271605f"

// declOf wraps resources in a declaration for node n1.
func declOf(resources ...string) []byte {
	return []byte(`{"version":1,"node":"n1","resources":[` + strings.Join(resources, ",") + `]}`)
}

// realistic is one declaration of every kind as an operator would write it.
var realistic = declOf(
	`{"type":"directory","id":"/srv/app","spec":{"mode":"0750","owner":"app","group":"app"}}`,
	`{"type":"directory","id":"/srv/shared/tmp","spec":{"mode":"1777"}}`,
	`{"type":"file","id":"app-config","spec":{"path":"/srv/app/config.toml","content":"port = 8080\n","mode":"0640","owner":"root","group":"app"}}`,
	`{"type":"file","id":"/usr/local/bin/app","spec":{"source":"sha256:`+hex64+`","mode":"0755","owner":"0","group":"0"}}`,
	`{"type":"archive","id":"/srv/app/static","spec":{"source":"sha256:`+hex64+`","owner":"www-data"}}`,
	`{"type":"service","id":"app.service","spec":{"enabled":true,"state":"running","unit_file":"[Unit]\nDescription=app\n[Service]\nExecStart=/usr/local/bin/app\n[Install]\nWantedBy=multi-user.target\n"}}`,
	`{"type":"service","id":"timer","spec":{"unit":"logrotate.timer","enabled":false,"state":"stopped"}}`,
	`{"type":"package","id":"nginx","spec":{"version":"1.22.1-9+deb12u1"}}`,
	`{"type":"package","id":"agent","spec":{"name":"acme-agent","version":"2:1.4.0~rc1-1","source":"sha256:`+hex64+`"}}`,
	`{"type":"package","id":"libc6:amd64"}`,
	`{"type":"container","id":"web","spec":{"image":"registry.example:5000/team/web:1.4@sha256:`+hex64+`","command":["--port","8080"],"env":{"LOG_LEVEL":"info","_X1":""},"ports":["8080:80","127.0.0.1:9090:9090/tcp","[::1]:53:53/udp","127.0.0.1::80"],"volumes":["/srv/app/data:/data","cache:/var/cache/web:ro,Z"],"restart":"unless-stopped","runtime":"podman"}}`,
)

func TestDeclarationAcceptsARealisticSpecOfEveryKindAndParsesIt(t *testing.T) {
	d, err := ParseDeclaration(realistic, "n1")
	if err != nil {
		t.Fatal(err)
	}
	wantTypes := []any{&DirectorySpec{}, &DirectorySpec{}, &FileSpec{}, &FileSpec{}, &ArchiveSpec{}, &ServiceSpec{}, &ServiceSpec{}, &PackageSpec{}, &PackageSpec{}, &PackageSpec{}, &ContainerSpec{}}
	if len(d.Resources) != len(wantTypes) {
		t.Fatalf("%d resources, want %d", len(d.Resources), len(wantTypes))
	}
	for i, r := range d.Resources {
		if reflect.TypeOf(r.Parsed) != reflect.TypeOf(wantTypes[i]) {
			t.Errorf("resources[%d] (%s) parsed as %T, want %T", i, r.Type, r.Parsed, wantTypes[i])
		}
	}
	if s := d.Resources[0].Parsed.(*DirectorySpec); s.Path != "/srv/app" || s.Mode != "0750" || s.Owner != "app" {
		t.Errorf("directory parsed as %+v; want the path defaulted to the id", s)
	}
	if s := d.Resources[2].Parsed.(*FileSpec); s.Path != "/srv/app/config.toml" || s.Content == nil || *s.Content != "port = 8080\n" {
		t.Errorf("file parsed as %+v", s)
	}
	if s := d.Resources[6].Parsed.(*ServiceSpec); s.Unit != "logrotate.timer" || s.Enabled == nil || *s.Enabled || s.State != "stopped" {
		t.Errorf("service parsed as %+v", s)
	}
	if s := d.Resources[5].Parsed.(*ServiceSpec); s.Unit != "app.service" || s.UnitFile == nil {
		t.Errorf("service parsed as %+v; want the unit defaulted to the id", s)
	}
	if s := d.Resources[9].Parsed.(*PackageSpec); s.Name != "libc6:amd64" {
		t.Errorf("package parsed as %+v; want the name defaulted to the id", s)
	}
	if s := d.Resources[10].Parsed.(*ContainerSpec); s.Name != "web" || s.Env["LOG_LEVEL"] != "info" || len(s.Volumes) != 2 || s.Runtime != "podman" {
		t.Errorf("container parsed as %+v", s)
	}
	if string(d.Resources[1].Spec) != `{"mode":"1777"}` {
		t.Errorf("the spec should stay as sent, got %s", d.Resources[1].Spec)
	}
}

func TestTrustedDeclarationAcceptsActionAndAnyNode(t *testing.T) {
	action := `{"type":"action","id":"swap","spec":{"command":["/usr/local/sbin/make-swap","2G"],"verify":["swapon","--show=NAME","--noheadings"]}}`
	for _, tc := range []struct {
		name, in, node string
	}{
		{"NodeLeftOut", `{"version":1,"resources":[` + action + `]}`, "n1"},
		{"NodeEmpty", `{"version":1,"node":"","resources":[` + action + `]}`, "n1"},
		{"NodeEmptyOnAHostWithoutAnID", `{"version":1,"node":"","resources":[` + action + `]}`, ""},
		{"ThisNode", `{"version":1,"node":"n1","resources":[` + action + `]}`, "n1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := ParseTrustedDeclaration([]byte(tc.in), tc.node)
			if err != nil {
				t.Fatal(err)
			}
			a, ok := d.Resources[0].Parsed.(*ActionSpec)
			if !ok || a.Command[0] != "/usr/local/sbin/make-swap" || a.Verify[0] != "swapon" {
				t.Fatalf("parsed %#v", d.Resources[0].Parsed)
			}
		})
	}
}

func TestTrustedDeclarationRefuses(t *testing.T) {
	for _, tc := range []struct {
		name, in, node, want string
	}{
		{"AnotherNode", `{"version":1,"node":"n2","resources":[]}`, "n1", `addressed to node "n2", but this is node "n1"`},
		{"ANodeOnAHostWithoutAnID", `{"version":1,"node":"n2","resources":[]}`, "", `addressed to node "n2", but this host has no node id`},
		{"NoResources", `{"version":1}`, "n1", `no "resources"`},
		{"ActionWithoutVerify", `{"version":1,"resources":[{"type":"action","id":"a","spec":{"command":["true"]}}]}`, "n1", `resources[0].spec.verify: an action needs verify`},
		{"ActionWithEmptyVerify", `{"version":1,"resources":[{"type":"action","id":"a","spec":{"command":["true"],"verify":[]}}]}`, "n1", `resources[0].spec.verify: an action needs verify`},
		{"ActionWithoutCommand", `{"version":1,"resources":[{"type":"action","id":"a","spec":{"verify":["true"]}}]}`, "n1", `resources[0].spec.command: an action needs a command`},
		{"ActionWithAnEmptyProgram", `{"version":1,"resources":[{"type":"action","id":"a","spec":{"command":[""],"verify":["true"]}}]}`, "n1", `resources[0].spec.command[0]: the program (the first element) is empty`},
		{"ActionWithANulInAnArgument", `{"version":1,"resources":[{"type":"action","id":"a","spec":{"command":["echo","a\u0000b"],"verify":["true"]}}]}`, "n1", `resources[0].spec.command[1]: contains a NUL byte`},
		{"ActionWithAnUnknownField", `{"version":1,"resources":[{"type":"action","id":"a","spec":{"command":["true"],"verify":["true"],"shell":true}}]}`, "n1", `resources[0].spec.shell: unknown field`},
		{"AProtectedPathStill", `{"version":1,"resources":[{"type":"file","id":"/var/lib/mesh-host/host.json","spec":{"content":"{}"}}]}`, "n1", `resources[0].id: path "/var/lib/mesh-host/host.json" is inside /var/lib/mesh-host`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTrustedDeclaration([]byte(tc.in), tc.node)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestLinkDeclarationRefusesActionSayingWhereItIsAccepted(t *testing.T) {
	in := declOf(`{"type":"action","id":"swap","spec":{"command":["true"],"verify":["true"]}}`)
	_, err := ParseDeclaration(in, "n1")
	if err == nil || err.Error() != `declaration: resources[0]: type "action" is accepted only from a local bundle, never over the link` {
		t.Fatalf("got %v", err)
	}
	if _, err := ParseDeclaration([]byte(`{"version":1,"resources":[]}`), "n1"); err == nil || !strings.Contains(err.Error(), `no "node"`) {
		t.Fatalf("a declaration over the link without a node: %v", err)
	}
}

// Every refusal names its place; the wording after the place is what an operator reads.
func TestDeclarationRefusesABadSpecNamingItsPlace(t *testing.T) {
	file := func(spec string) string { return `{"type":"file","id":"/srv/f","spec":` + spec + `}` }
	dir := func(spec string) string { return `{"type":"directory","id":"/srv/d","spec":` + spec + `}` }
	svc := func(id, spec string) string { return `{"type":"service","id":"` + id + `","spec":` + spec + `}` }
	pkg := func(id, spec string) string { return `{"type":"package","id":"` + id + `","spec":` + spec + `}` }
	ctr := func(spec string) string { return `{"type":"container","id":"web","spec":` + spec + `}` }
	img := `"image":"nginx@sha256:` + hex64 + `"`
	ok := dir(`{}`)
	for _, tc := range []struct {
		name, resource, want string
	}{
		// Strict decoding.
		{"UnknownFieldInASpec", file(`{"content":"","mode":"0644","colour":"blue"}`), `resources[3].spec.colour: unknown field`},
		{"UnknownFieldDeepInASpec", ctr(`{` + img + `,"env":{"A":"1"},"ports":["80"],"extra":{"x":1}}`), `resources[3].spec.extra: unknown field`},
		{"FieldInAnotherCase", file(`{"Content":""}`), `resources[3].spec: "Content" is not a field (did you mean "content"?)`},
		{"WrongJSONType", file(`{"content":"","mode":644}`), `resources[3].spec.mode: a JSON number where a string belongs`},
		{"WrongJSONTypeInAList", ctr(`{` + img + `,"ports":[80]}`), `resources[3].spec.ports: a JSON number where a string belongs`},
		{"DuplicateKeyInASpec", file(`{"content":"","mode":"0644","mode":"0600"}`), `resources[3].spec: duplicate key "mode"`},
		{"IDTooLong", `{"type":"directory","id":"/` + strings.Repeat("a", MaxIDBytes) + `"}`, `resources[3]: directory id of 4097 bytes is longer than 4096`},
		// Paths.
		{"RelativeIDAsPath", `{"type":"directory","id":"srv/d"}`, `resources[3].id: path "srv/d" is not absolute (a directory's path defaults to its id; set spec.path to name another)`},
		{"RelativePath", file(`{"path":"etc/motd","content":""}`), `resources[3].spec.path: path "etc/motd" is not absolute`},
		{"FilesystemRoot", dir(`{"path":"/"}`), `resources[3].spec.path: path "/" is the filesystem root`},
		{"PathElementTooLong", dir(`{"path":"/srv/` + strings.Repeat("x", 256) + `"}`), `resources[3].spec.path: path "/srv/xxx`},
		// Modes, owners.
		{"ModeNotOctal", dir(`{"mode":"0999"}`), `resources[3].spec.mode: "0999" is not an octal mode like "0644"`},
		{"ModeSymbolic", dir(`{"mode":"u+rwx"}`), `resources[3].spec.mode: "u+rwx" is not an octal mode like "0644"`},
		{"ModeTooLong", dir(`{"mode":"00755"}`), `resources[3].spec.mode: "00755" is not an octal mode`},
		{"ModeSetuid", file(`{"content":"","mode":"4755"}`), `resources[3].spec.mode: "4755" sets the setuid bit, which is refused: it would let whoever runs the file act as its owner`},
		{"ModeSetgidOnADirectory", dir(`{"mode":"2775"}`), `resources[3].spec.mode: "2775" sets the setgid bit, which is refused`},
		{"StickyOnAFile", file(`{"content":"","mode":"1644"}`), `resources[3].spec.mode: "1644" sets the sticky bit, which means something only on a directory`},
		{"OwnerWithASpace", dir(`{"owner":"app user"}`), `resources[3].spec.owner: "app user" is not a name`},
		{"OwnerUppercase", dir(`{"owner":"App"}`), `resources[3].spec.owner: "App" is not a name`},
		{"OwnerTooLong", dir(`{"owner":"` + strings.Repeat("a", 33) + `"}`), `resources[3].spec.owner:`},
		{"GroupIDMinusOne", dir(`{"group":"4294967295"}`), `resources[3].spec.group: "4294967295" is not a valid numeric id`},
		{"GroupNegative", dir(`{"group":"-1"}`), `resources[3].spec.group: "-1" is not a name`},
		// Files and archives.
		{"FileWithNeitherContentNorSource", file(`{}`), `resources[3].spec: a file needs exactly one of "content" (its text) or "source" (a blob's digest); it has neither`},
		{"FileWithBoth", file(`{"content":"x","source":"sha256:` + hex64 + `"}`), `resources[3].spec: a file needs exactly one of "content" or "source"; it has both`},
		{"SourceNotADigest", file(`{"source":"https://example.com/app"}`), `resources[3].spec.source: "https://example.com/app" is not a digest like "sha256:<64 lowercase hex digits>"`},
		{"SourceUppercaseHex", file(`{"source":"sha256:` + strings.ToUpper(hex64) + `"}`), `resources[3].spec.source: "sha256:3F4D`},
		{"SourceShort", file(`{"source":"sha256:abc"}`), `resources[3].spec.source: "sha256:abc" is not a digest`},
		{"SourceOtherAlgorithm", file(`{"source":"sha512:` + hex64 + hex64 + `"}`), `resources[3].spec.source: "sha512:`},
		{"ArchiveWithoutSource", `{"type":"archive","id":"/srv/static"}`, `resources[3].spec.source: a source is required`},
		// Services.
		{"ServiceWithoutSuffix", svc("app", `{}`), `resources[3].id: unit "app" has no unit suffix (.service .socket .timer .path .mount .target)`},
		{"ServiceBadCharacter", svc("app$.service", `{}`), `resources[3].id: unit "app$.service" contains "$"`},
		{"ServiceTemplate", svc("getty@.service", `{}`), `resources[3].id: unit "getty@.service" is a template; name an instance of it, such as getty@name.service`},
		{"ServiceUnitWithSlash", svc("x", `{"unit":"../x.service"}`), `resources[3].spec.unit: unit "../x.service": a unit name holds no '/'`},
		{"ServiceBadState", svc("app.service", `{"state":"started"}`), `resources[3].spec.state: "started" is not a state: "running", "stopped"`},
		{"ServiceEmptyUnitFile", svc("app.service", `{"unit_file":""}`), `resources[3].spec.unit_file: unit_file is empty`},
		// Packages.
		{"PackageUppercase", pkg("Nginx", `{}`), `resources[3].id: "Nginx" is not a Debian package name`},
		{"PackageOneLetter", pkg("x", `{}`), `resources[3].id: "x" is not a Debian package name`},
		{"PackageFlag", pkg("x", `{"name":"-y"}`), `resources[3].spec.name: "-y" is not a Debian package name`},
		{"PackageVersionWithoutDigit", pkg("nginx", `{"version":"latest"}`), `resources[3].spec.version: "latest" is not a Debian version ([epoch:]upstream[-revision]): the upstream version must start with a digit`},
		{"PackageVersionBadEpoch", pkg("nginx", `{"version":"a:1.0"}`), `resources[3].spec.version: "a:1.0" is not a Debian version ([epoch:]upstream[-revision]): the epoch before ':' must be digits`},
		{"PackageVersionSpace", pkg("nginx", `{"version":"1.0 beta"}`), `resources[3].spec.version: "1.0 beta" is not a Debian version`},
		{"PackageVersionEmptyRevision", pkg("nginx", `{"version":"1.0-"}`), `the revision after the last '-' is empty`},
		{"PackageSourceNotADigest", pkg("nginx", `{"source":"nginx.deb"}`), `resources[3].spec.source: "nginx.deb" is not a digest`},
		// Containers.
		{"ContainerTagOnly", ctr(`{"image":"nginx:1.27"}`), `resources[3].spec.image: image "nginx:1.27" must be pinned by digest (nginx:1.27@sha256:<64 hex>): a tag can move`},
		{"ContainerNoImage", ctr(`{}`), `resources[3].spec.image: an image is required, pinned by digest`},
		{"ContainerShortDigest", ctr(`{"image":"nginx@sha256:abc"}`), `resources[3].spec.image: image "nginx@sha256:abc": "sha256:abc" is not a digest`},
		{"ContainerImageFlag", ctr(`{"image":"--privileged@sha256:` + hex64 + `"}`), `is not an image name`},
		{"ContainerBadName", ctr(`{"name":"-web",` + img + `}`), `resources[3].spec.name: "-web" is not a container name`},
		{"ContainerBadRestart", ctr(`{` + img + `,"restart":"sometimes"}`), `resources[3].spec.restart: "sometimes" is not a restart policy`},
		{"ContainerBadRuntime", ctr(`{` + img + `,"runtime":"lxc"}`), `resources[3].spec.runtime: "lxc" is not a runtime: "docker", "podman"`},
		{"ContainerBadEnvKey", ctr(`{` + img + `,"env":{"1X":"y"}}`), `resources[3].spec.env.1X: "1X" is not an environment variable name`},
		{"ContainerEnvKeyWithEquals", ctr(`{` + img + `,"env":{"A=B":"y"}}`), `resources[3].spec.env["A=B"]: "A=B" is not an environment variable name`},
		{"ContainerBadPort", ctr(`{` + img + `,"ports":["80","http"]}`), `resources[3].spec.ports[1]: "http" is not a port mapping`},
		{"ContainerPortZero", ctr(`{` + img + `,"ports":["0:80"]}`), `resources[3].spec.ports[0]: "0:80" is not a port mapping`},
		{"ContainerRelativeVolume", ctr(`{` + img + `,"volumes":["./data:/data"]}`), `resources[3].spec.volumes[0]: "./data:/data": the source "./data" is neither an absolute host path nor a volume name`},
		{"ContainerVolumeWithoutDestination", ctr(`{` + img + `,"volumes":["/srv/data"]}`), `resources[3].spec.volumes[0]: "/srv/data" is not a volume like`},
		{"ContainerVolumeRelativeDestination", ctr(`{` + img + `,"volumes":["/srv/data:data"]}`), `the destination "data" is not an absolute path`},
		{"ContainerEmptyCommandProgram", ctr(`{` + img + `,"command":[""]}`), `resources[3].spec.command[0]: the program (the first element) is empty`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDeclaration(declOf(ok, ok2, ok3, tc.resource), "n1")
			if err == nil {
				t.Fatalf("accepted %s", tc.resource)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "declaration: resources[3]") {
				t.Fatalf("error %q does not start with its place, resources[3]", err)
			}
		})
	}
}

var (
	ok2 = `{"type":"directory","id":"/srv/d2"}`
	ok3 = `{"type":"directory","id":"/srv/d3"}`
)

// The reproductions, and the same by other spellings: each refused by name, with the
// resource's place in the message.
func TestDeclarationRefusesWhatTheInstallationOwns(t *testing.T) {
	for _, tc := range []struct {
		name, resource, want string
	}{
		{"LauncherServiceByUnit", `{"type":"service","id":"mesh-launcher.service"}`, `resources[3].id: unit "mesh-launcher.service" is the launcher's own unit: the package owns it, never a declaration`},
		{"LauncherServiceWithoutSuffix", `{"type":"service","id":"mesh-launcher"}`, `resources[3].id: unit "mesh-launcher" is the launcher's own unit`},
		{"LauncherServiceNamedInSpec", `{"type":"service","id":"x","spec":{"unit":"mesh-launcher.service","state":"stopped"}}`, `resources[3].spec.unit: unit "mesh-launcher.service" is the launcher's own unit`},
		{"LauncherTimer", `{"type":"service","id":"mesh-launcher.timer"}`, `resources[3].id: unit "mesh-launcher.timer" would start or change the launcher's own unit (mesh-launcher.service)`},
		{"LauncherSocket", `{"type":"service","id":"mesh-launcher.socket"}`, `would start or change the launcher's own unit`},
		{"VersionsFile", `{"type":"file","id":"/var/lib/mesh-host/versions/v9.9.9/mesh-host","spec":{"source":"sha256:` + hex64 + `","mode":"0755"}}`, `resources[3].id: path "/var/lib/mesh-host/versions/v9.9.9/mesh-host" is inside /var/lib/mesh-host, which the installation owns, not the host`},
		{"VersionsFileThroughDotDot", `{"type":"file","id":"x","spec":{"path":"/var/lib/mesh-host/../mesh-host/versions/v9.9.9/mesh-host","content":""}}`, `resources[3].spec.path: path "/var/lib/mesh-host/../mesh-host/versions/v9.9.9/mesh-host" is inside /var/lib/mesh-host`},
		{"RootWithDoubleSlash", `{"type":"directory","id":"//var/lib/mesh-host/"}`, `resources[3].id: path "//var/lib/mesh-host/" is inside /var/lib/mesh-host`},
		{"StoreThroughDot", `{"type":"file","id":"/var/lib/mesh-host/./store.db","spec":{"content":""}}`, `resources[3].id: path "/var/lib/mesh-host/./store.db" is inside /var/lib/mesh-host`},
		{"Credentials", `{"type":"file","id":"/var/lib/mesh-host/node.creds","spec":{"content":""}}`, `is inside /var/lib/mesh-host`},
		{"LauncherBinary", `{"type":"file","id":"/usr/bin/mesh-launcher","spec":{"content":""}}`, `resources[3].id: path "/usr/bin/mesh-launcher" is inside /usr/bin/mesh-launcher, which the installation owns`},
		{"LauncherBinaryMergedUsr", `{"type":"file","id":"/bin/mesh-launcher","spec":{"content":""}}`, `is inside /bin/mesh-launcher`},
		{"PackagedHost", `{"type":"archive","id":"/usr/share/mesh-host","spec":{"source":"sha256:` + hex64 + `"}}`, `is inside /usr/share/mesh-host`},
		{"LauncherDropIn", `{"type":"file","id":"/etc/systemd/system/mesh-launcher.service.d/x.conf","spec":{"content":"[Service]\nExecStart=\n"}}`, `resources[3].id: path "/etc/systemd/system/mesh-launcher.service.d/x.conf" names mesh-launcher.service.d, the launcher's own unit`},
		{"LauncherDropInDirectory", `{"type":"directory","id":"/etc/systemd/system/mesh-launcher.service.d"}`, `names mesh-launcher.service.d`},
		{"LauncherUnitFile", `{"type":"file","id":"/lib/systemd/system/mesh-launcher.service","spec":{"content":""}}`, `names mesh-launcher.service, the launcher's own unit`},
		{"LauncherMask", `{"type":"file","id":"/etc/systemd/system/mesh-launcher.service","spec":{"content":""}}`, `names mesh-launcher.service`},
		{"LauncherWantsLink", `{"type":"file","id":"/etc/systemd/system/multi-user.target.wants/mesh-launcher.service","spec":{"content":""}}`, `names mesh-launcher.service`},
		{"LauncherRuntimeDropIn", `{"type":"file","id":"/run/systemd/system/mesh-launcher.service.d/override.conf","spec":{"content":""}}`, `names mesh-launcher.service.d`},
		{"ArchiveAboveTheRoot", `{"type":"archive","id":"/var/lib","spec":{"source":"sha256:` + hex64 + `"}}`, `resources[3].id: path "/var/lib" holds /var/lib/mesh-host, which the installation owns: what is put under it could reach inside`},
		{"VolumeOfTheRoot", `{"type":"container","id":"web","spec":{"image":"nginx@sha256:` + hex64 + `","volumes":["/var/lib/mesh-host:/data"]}}`, `resources[3].spec.volumes[0]: path "/var/lib/mesh-host" is inside /var/lib/mesh-host`},
		{"VolumeAboveTheRoot", `{"type":"container","id":"web","spec":{"image":"nginx@sha256:` + hex64 + `","volumes":["/var:/host-var:ro"]}}`, `resources[3].spec.volumes[0]: path "/var" holds /var/lib/mesh-host`},
		{"VolumeOfTheLauncher", `{"type":"container","id":"web","spec":{"image":"nginx@sha256:` + hex64 + `","volumes":["/usr/bin/mesh-launcher:/x"]}}`, `is inside /usr/bin/mesh-launcher`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseDeclaration(declOf(ok2, ok3, `{"type":"directory","id":"/srv/d4"}`, tc.resource), "n1")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error\n  %v\nwant it to contain\n  %s", err, tc.want)
			}
		})
	}
}

func TestDeclarationAllowsADirectoryAboveTheRoot(t *testing.T) {
	// Declaring /var/lib manages its mode and owner; no applier removes a non-empty directory,
	// so it cannot take the root with it.
	for _, res := range []string{
		`{"type":"directory","id":"/var/lib","spec":{"mode":"0755"}}`,
		`{"type":"directory","id":"/var/lib/mesh-hostess"}`,
		`{"type":"file","id":"/usr/bin/mesh-launcher-helper","spec":{"content":""}}`,
		`{"type":"file","id":"/etc/systemd/system/app.service.d/mesh-launcher.conf.txt","spec":{"content":""}}`,
		`{"type":"archive","id":"/etc/systemd/system","spec":{"source":"sha256:` + hex64 + `"}}`,
	} {
		if _, err := ParseDeclaration(declOf(res), "n1"); err != nil {
			t.Errorf("%s: %v", res, err)
		}
	}
}

// Seed 000: the host may replace its own binary, never stop its own unit. A package resource
// naming the installation is accepted (its postinst leaves the unit running when the launcher
// takes the new binary by exec); the files it installs stay refused to every other resource.
func TestDeclarationAcceptsThePackageThatInstallsTheHost(t *testing.T) {
	for _, res := range []string{
		`{"type":"package","id":"mesh-host"}`,
		`{"type":"package","id":"mesh-host","spec":{"version":"1.5.0"}}`,
		`{"type":"package","id":"host-pkg","spec":{"name":"mesh-host:amd64","version":"1.5.0~dev.1","source":"sha256:` + hex64 + `"}}`,
	} {
		d, err := ParseDeclaration(declOf(res), "n1")
		if err != nil {
			t.Errorf("%s: %v", res, err)
			continue
		}
		if got := d.Resources[0].Type; got != "package" {
			t.Errorf("%s parsed as %q", res, got)
		}
	}
	// What the package installs is still no other resource's to write.
	for _, res := range []string{
		`{"type":"file","id":"/usr/bin/mesh-launcher","spec":{"content":""}}`,
		`{"type":"file","id":"/lib/systemd/system/mesh-launcher.service","spec":{"content":""}}`,
		`{"type":"file","id":"/etc/systemd/system/mesh-launcher.service.d/x.conf","spec":{"content":""}}`,
		`{"type":"service","id":"mesh-launcher.service"}`,
	} {
		if _, err := ParseDeclaration(declOf(`{"type":"package","id":"mesh-host"}`, res), "n1"); err == nil {
			t.Errorf("%s was accepted beside the mesh-host package", res)
		}
	}
}

func TestCheckDeclarationPathsRefusesTheConfiguredRoot(t *testing.T) {
	in := declOf(
		`{"type":"directory","id":"/srv/app"}`,
		`{"type":"file","id":"/srv/mesh/store.db","spec":{"content":""}}`,
	)
	d, err := ParseDeclaration(in, "n1")
	if err != nil {
		t.Fatalf("the parser knows only the default root: %v", err)
	}
	if err := CheckDeclarationPaths(d, DefaultRoot); err != nil {
		t.Fatalf("with the default root: %v", err)
	}
	err = CheckDeclarationPaths(d, "/srv/mesh/")
	if err == nil || err.Error() != `declaration: resources[1].id: path "/srv/mesh/store.db" is inside /srv/mesh, which the installation owns, not the host (a file's path defaults to its id; set spec.path to name another)` {
		t.Fatalf("got %v", err)
	}
	for _, res := range []string{
		`{"type":"archive","id":"/srv","spec":{"source":"sha256:` + hex64 + `"}}`,
		`{"type":"container","id":"c","spec":{"image":"a@sha256:` + hex64 + `","volumes":["/srv/mesh/x:/x"]}}`,
		`{"type":"service","id":"a.service","spec":{"unit_file":"[Unit]\n"}}`,
	} {
		d, err := ParseDeclaration(declOf(res), "n1")
		if err != nil {
			t.Fatal(err)
		}
		err = CheckDeclarationPaths(d, "/srv/mesh")
		if res[9] == 's' { // the service: its unit file is elsewhere
			if err != nil {
				t.Errorf("%s: %v", res, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), "/srv/mesh") {
			t.Errorf("%s with root /srv/mesh: %v", res, err)
		}
	}
}

func TestParseSpecReadsAStoredSpecAsTheParserDid(t *testing.T) {
	v, err := ParseSpec(KindFile, "/srv/f", []byte(`{"content":"x","mode":"0600"}`), "")
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := v.(*FileSpec); !ok || f.Path != "/srv/f" || f.Mode != "0600" {
		t.Fatalf("got %#v", v)
	}
	if _, err := ParseSpec(KindAction, "a", nil, ""); err == nil || err.Error() != "spec.command: an action needs a command, as a list of program and arguments" {
		t.Fatalf("an empty action spec: %v", err)
	}
	if _, err := ParseSpec(KindFile, "/srv/f", []byte(`{"content":"x","mode":"0600","x":1}`), ""); err == nil || err.Error() != "spec.x: unknown field" {
		t.Fatalf("got %v", err)
	}
	if _, err := ParseSpec("fiel", "/srv/f", nil, ""); err == nil || !strings.Contains(err.Error(), `unknown type "fiel"`) {
		t.Fatalf("got %v", err)
	}
}

func TestParseModeReturnsWhatChmodTakes(t *testing.T) {
	for in, want := range map[string]fs.FileMode{
		"0644": 0o644, "755": 0o755, "0000": 0, "1777": 0o777 | fs.ModeSticky, "0700": 0o700,
	} {
		got, err := ParseMode(in)
		if err != nil || got != want {
			t.Errorf("ParseMode(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64", "0o644", "0x1ff", "+644", "06440", "4755", "2755", "6755", "0999", "٠٦٤٤"} {
		if _, err := ParseMode(in); err == nil {
			t.Errorf("ParseMode(%q) accepted", in)
		}
	}
}

func TestValidDebianVersion(t *testing.T) {
	for _, v := range []string{"1.0", "1:2.30-1ubuntu1", "2.36-9+deb12u4", "1.0~rc1", "0.9.8", "7.88.1-10+deb12u5", "1:1.2.3-4-5", "1.0+git20230101.abc-1~bpo12+1", "2:8.2.3995-1+deb12u2"} {
		if err := ValidDebianVersion(v); err != nil {
			t.Errorf("ValidDebianVersion(%q) = %v", v, err)
		}
	}
	for _, v := range []string{"", "latest", "v1.0", "1.0 beta", "1:", ":1.0", "1.0-", "1.0-a_b", "1.0/2", "-1.0", strings.Repeat("1", 300)} {
		if err := ValidDebianVersion(v); err == nil {
			t.Errorf("ValidDebianVersion(%q) accepted", v)
		}
	}
}

func TestValidUnitNameAcceptsEverySuffixTheServiceApplierManages(t *testing.T) {
	for _, u := range []string{"app.service", "app.socket", "app.timer", "app.path", "srv-data.mount", "multi-user.target", "getty@tty1.service", `dev-disk-by\x2dlabel-data.mount`, "a:b_c.service"} {
		if err := ValidUnitName(u); err != nil {
			t.Errorf("ValidUnitName(%q) = %v", u, err)
		}
	}
	for _, u := range []string{".service", "app.slice", "app", "app service.service", "-app.service", "app.service.d", strings.Repeat("a", 250) + ".service"} {
		if err := ValidUnitName(u); err == nil {
			t.Errorf("ValidUnitName(%q) accepted", u)
		}
	}
}

func TestCheckPinnedImage(t *testing.T) {
	for _, img := range []string{"nginx@sha256:" + hex64, "docker.io/library/nginx:1.27@sha256:" + hex64, "localhost:5000/a/b@sha256:" + hex64, "quay.io/Org/app@sha256:" + hex64} {
		if err := CheckPinnedImage(img); err != nil {
			t.Errorf("CheckPinnedImage(%q) = %v", img, err)
		}
	}
	for _, img := range []string{"", "nginx", "nginx:latest", "nginx@sha256:" + hex64[:63], "nginx@sha512:" + hex64, "@sha256:" + hex64, "ngi nx@sha256:" + hex64, "a//b@sha256:" + hex64, "a:@sha256:" + hex64} {
		if err := CheckPinnedImage(img); err == nil {
			t.Errorf("CheckPinnedImage(%q) accepted", img)
		}
	}
}

func TestSpecErrorsAreBoundedWhateverTheInput(t *testing.T) {
	huge := strings.Repeat("é", 50_000)
	for _, res := range []string{
		`{"type":"directory","id":"/srv/d","spec":{"mode":"` + huge + `"}}`,
		`{"type":"directory","id":"/srv/d","spec":{"` + huge + `":1}}`,
		`{"type":"container","id":"c","spec":{"image":"` + huge + `"}}`,
		`{"type":"container","id":"c","spec":{"image":"a@sha256:` + hex64 + `","env":{"` + huge + `":"x"}}}`,
		`{"type":"service","id":"` + huge[:4000] + `"}`,
		`{"type":"fiel` + huge + `","id":"x"}`,
	} {
		_, err := ParseDeclaration(declOf(res), "n1")
		if err == nil {
			t.Fatal("accepted")
		}
		if len(err.Error()) > 1024 {
			t.Errorf("an error of %d bytes: %.200s…", len(err.Error()), err)
		}
	}
}

func TestFieldErrUnwraps(t *testing.T) {
	sentinel := errors.New("x")
	fe := &fieldErr{at: []segment{key("spec"), key("mode")}, err: sentinel}
	if !errors.Is(fe, sentinel) || fe.Error() != "spec.mode: x" {
		t.Fatalf("got %v", fe)
	}
	_ = fmt.Sprint(fe)
}
