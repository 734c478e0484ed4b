// Command applyone runs one resource through its applier once, on the machine it runs on.
//
// The real-systemd lab copies it into a node to drive host/apply/systemd and host/apply/debian
// against a real systemd and dpkg, apart from the host's engine (which the lab tests through
// `mesh-host apply` and the bus).
//
//	applyone inspect|apply|remove TYPE ID SPEC-JSON [created]
//
// Blobs (a package's source) are read from $APPLYONE_BLOBS/sha256/<hex>. It prints what the
// applier returned: inspect its differences, one a line; apply "created=<bool>"; remove its
// result. An error goes to stderr with exit status 1; a bad invocation exits 2.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/novox/mesh-host/host/apply"
	"github.com/novox/mesh-host/host/apply/debian"
	"github.com/novox/mesh-host/host/apply/systemd"
	"github.com/novox/mesh-host/wire"
)

// lexical is the guard's lexical half; the lab's paths hold no symlinks.
type lexical struct{}

func (lexical) Check(p string) error { return wire.CheckManagedPath(p, "") }

// dirBlobs reads blobs from a directory laid out as the host's cache (sha256/<hex>); the
// package applier checks the digest itself.
type dirBlobs string

func (d dirBlobs) Open(_ context.Context, digest string) (io.ReadCloser, error) {
	hex, ok := strings.CutPrefix(digest, "sha256:")
	if !ok || strings.ContainsAny(hex, "/.") {
		return nil, fmt.Errorf("blob %q: not a digest", digest)
	}
	return os.Open(filepath.Join(string(d), "sha256", hex))
}

func main() {
	if len(os.Args) < 5 {
		fmt.Fprintln(os.Stderr, "usage: applyone inspect|apply|remove TYPE ID SPEC-JSON [created]")
		os.Exit(2)
	}
	op, typ, id, raw := os.Args[1], os.Args[2], os.Args[3], os.Args[4]
	var appl apply.Applier
	var parsed any
	switch typ {
	case "service":
		appl, parsed = systemd.Service(lexical{}), &wire.ServiceSpec{}
	case "package":
		appl, parsed = debian.Package(dirBlobs(os.Getenv("APPLYONE_BLOBS"))), &wire.PackageSpec{}
	default:
		fmt.Fprintf(os.Stderr, "applyone: no applier for %q here\n", typ)
		os.Exit(2)
	}
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(parsed); err != nil {
		fmt.Fprintf(os.Stderr, "applyone: spec: %v\n", err)
		os.Exit(2)
	}
	r := wire.Resource{Type: typ, ID: id, Spec: json.RawMessage(raw), Parsed: parsed}
	ctx := context.Background()
	var err error
	switch op {
	case "inspect":
		var diffs []string
		if diffs, err = appl.Inspect(ctx, r); err == nil {
			for _, d := range diffs {
				fmt.Println(d)
			}
		}
	case "apply":
		var created bool
		if created, err = appl.Apply(ctx, r); err == nil {
			fmt.Printf("created=%v\n", created)
		}
	case "remove":
		o := apply.Owned{Type: typ, ID: id, Spec: r.Spec, Parsed: parsed, Created: len(os.Args) > 5 && os.Args[5] == "created"}
		var result string
		if result, err = appl.Remove(ctx, o); err == nil {
			fmt.Println(result)
		}
	default:
		fmt.Fprintf(os.Stderr, "applyone: %q is not inspect, apply or remove\n", op)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "applyone: %v\n", err)
		os.Exit(1)
	}
}
