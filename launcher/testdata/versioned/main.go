// Command versioned is a stand-in for mesh-host in install's tests: `versioned version` prints
// main.version, or does what main.mode says instead. Built with
//
//	go build -ldflags "-X main.version=v1.0.0 -X main.mode=ok" ./testdata/versioned
package main

import (
	"fmt"
	"os"
)

var (
	version = "v0.0.0-dev"
	mode    = "ok" // ok; fail: exit 1 saying why; garbage: print something that is no version
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "version" {
		fmt.Fprintln(os.Stderr, "versioned: only `version` is known")
		os.Exit(2)
	}
	switch mode {
	case "fail":
		fmt.Fprintln(os.Stderr, "cannot start: missing library")
		os.Exit(1)
	case "garbage":
		fmt.Println("hello, world")
	default:
		fmt.Println(version)
	}
}
