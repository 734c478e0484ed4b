package wire_test

import (
	"fmt"

	"github.com/novox/mesh-host/wire"
)

// A declaration is refused whole for a mistake in any spec, naming its place.
func ExampleParseDeclaration_refusedSpec() {
	_, err := wire.ParseDeclaration([]byte(`{"version": 1, "node": "web-01", "resources": [
		{"type": "directory", "id": "/srv/app", "spec": {"mode": "0755"}},
		{"type": "file", "id": "/srv/app/config.toml", "spec": {"content": "port = 8080\n", "mod": "0644"}}
	]}`), "web-01")
	fmt.Println(err)
	_, err = wire.ParseDeclaration([]byte(`{"version": 1, "node": "web-01", "resources": [
		{"type": "service", "id": "mesh-launcher.service", "spec": {"state": "stopped"}}
	]}`), "web-01")
	fmt.Println(err)
	// Output:
	// declaration: resources[1].spec.mod: unknown field
	// declaration: resources[0].id: unit "mesh-launcher.service" is the launcher's own unit: the package owns it, never a declaration
}

// A local bundle may hold actions and be for any node; each resource arrives parsed.
func ExampleParseTrustedDeclaration() {
	d, err := wire.ParseTrustedDeclaration([]byte(`{"version": 1, "resources": [
		{"type": "file", "id": "/etc/motd", "spec": {"content": "managed\n"}},
		{"type": "action", "id": "swap", "spec": {"command": ["/usr/local/sbin/make-swap"], "verify": ["/usr/local/sbin/has-swap"]}}
	]}`), "web-01")
	if err != nil {
		fmt.Println(err)
		return
	}
	f := d.Resources[0].Parsed.(*wire.FileSpec)
	a := d.Resources[1].Parsed.(*wire.ActionSpec)
	fmt.Println(f.Path, *f.Content == "managed\n", a.Verify[0])
	// Output: /etc/motd true /usr/local/sbin/has-swap
}
