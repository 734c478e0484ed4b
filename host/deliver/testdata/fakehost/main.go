// Command fakehost stands in for mesh-host in host/deliver's tests. Its version and its
// behaviour under `preflight` are stamped at build time:
//
//	go build -ldflags "-X main.version=v1.0.0 -X main.mode=ok" ./testdata/fakehost
//
// ok prints the version and checks that MESH_HOST_ROOT is a directory; fail prints the version
// and exits 3 with a reason; hang prints the version and never exits; held prints the version
// (nothing while the file $FAKEHOST_MUTE exists) and exits 0, leaving a child that holds its
// stdout open for 30 s. `fakehost version` stands in for `mesh-launcher version`: it prints the
// version, then ok exits 0, fail exits 3 and hang never exits.
package main

import (
	"fmt"
	"os"
	"os/exec"
	"time"
)

var (
	version = "v0.0.0-dev"
	mode    = "ok"
)

func main() {
	if len(os.Args) == 2 && os.Args[1] == "hold" {
		time.Sleep(30 * time.Second)
		return
	}
	if len(os.Args) == 2 && os.Args[1] == "version" {
		fmt.Println(version)
		switch mode {
		case "fail":
			fmt.Fprintln(os.Stderr, "records.db: database is locked")
			os.Exit(3)
		case "hang":
			for {
				time.Sleep(time.Hour)
			}
		}
		return
	}
	if len(os.Args) < 2 || os.Args[1] != "preflight" {
		fmt.Fprintln(os.Stderr, "usage: fakehost preflight")
		os.Exit(2)
	}
	if mode == "held" {
		if _, err := os.Stat(os.Getenv("FAKEHOST_MUTE")); err != nil {
			fmt.Println(version)
		}
		child := exec.Command(os.Args[0], "hold")
		child.Stdout = os.Stdout // the child inherits the descriptor: the pipe stays open
		if err := child.Start(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		return
	}
	fmt.Println(version)
	switch mode {
	case "fail":
		fmt.Fprintln(os.Stderr, "records.db: schema 9 is newer than this binary understands")
		os.Exit(3)
	case "hang":
		for {
			time.Sleep(time.Hour)
		}
	}
	root := os.Getenv("MESH_HOST_ROOT")
	if fi, err := os.Stat(root); err != nil || !fi.IsDir() {
		fmt.Fprintf(os.Stderr, "root %q is not readable: %v\n", root, err)
		os.Exit(1)
	}
}
