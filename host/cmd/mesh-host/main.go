// Command mesh-host is the host: it holds the node in its declared state.
//
// Started by mesh-launcher as `mesh-host run`, it stands aside for a newer version. See package
// host/cli.
package main

import (
	"os"

	"github.com/novox/mesh-host/host/cli"
)

// version is stamped by `make build VERSION=…`; the launcher checks it against the directory.
var version = "v0.0.0-dev"

func main() { os.Exit(cli.Main(version, os.Args)) }
