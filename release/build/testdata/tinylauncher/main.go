// Command tinylauncher stands in for mesh-launcher in release/build's tests: it prints its own
// version for `version` and `--version`, as mesh-launcher does, and refuses anything else.
package main

import (
	"fmt"
	"os"
)

var version = "v0.3.0"

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "version" || os.Args[1] == "--version") {
		fmt.Println(version)
		return
	}
	fmt.Fprintln(os.Stderr, "usage: tinylauncher version")
	os.Exit(2)
}
