package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/blobs"
)

const blobArgs = "(put FILE… | ls) [flags]"

const blobAbout = `A blob is a file a declaration names by digest: a file's, an archive's or a package's
"source": "sha256:<hex>". Nodes fetch it over their link from the object store <prefix>_blobs,
verify it and keep it in ROOT/blobs; a bundle carries it as blobs/sha256/<hex> instead.

subcommands:
  put FILE…  put each FILE into <prefix>_blobs under the name of its digest and print
             "sha256:<hex>  SIZE  FILE" (the object store is created if it is missing);
             a FILE already there is left alone and said so — safe to repeat
  ls         list the blobs on the bus (--json: as JSON)

Run ` + "`mesh-release blob <subcommand> --help`" + ` for its flags.`

// blobCommands are the subcommands of `mesh-release blob`.
var blobCommands = []command{
	{"blob put", "FILE…", "put files on the bus for declarations to name by digest", blobPutAbout, blobPutCmd},
	{"blob ls", "", "list the blobs on the bus", "", blobLsCmd},
}

const blobPutAbout = `Puts each FILE into the object store <prefix>_blobs (created if missing) under the name of
its sha256 digest, and prints one line per FILE: "sha256:<hex>  SIZE  FILE" — the digest is what
a declaration's "source" names. A FILE the store holds already (same name, size and digest) is
not sent again ("already there"). A FILE larger than 1 GiB is put, with a warning: hosts refuse
blobs larger than that by default.`

func blobCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	return dispatch(ctx, s, fs, args, "blob", blobCommands)
}

func blobPutCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("want FILE, one or more")
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	for _, file := range pos {
		p, err := blobs.PutFile(ctx, c.JS, b.names(), file)
		if err != nil {
			return err // it names the file
		}
		note := ""
		if p.Already {
			note = "  (already there)"
		}
		s.printf("%s  %d  %s%s\n", p.Digest, p.Size, shownPath(file), note)
		if p.Size > blobs.HostMaxSize {
			fmt.Fprintf(s.err, "mesh-release blob put: warning: %s is %d bytes; hosts refuse blobs over %d bytes by default\n", shownPath(file), p.Size, blobs.HostMaxSize)
		}
	}
	return nil
}

func blobLsCmd(ctx context.Context, s *stdio, fs *flag.FlagSet, args []string) error {
	var b busFlags
	b.register(fs, s.getenv)
	asJSON := fs.Bool("json", false, "write the list as JSON")
	if err := noArgs(fs, args); err != nil {
		return err
	}
	c, err := b.connect(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	list, err := blobs.List(ctx, c.JS, b.names())
	if err != nil {
		return err
	}
	if *asJSON {
		if list == nil {
			list = []blobs.Blob{}
		}
		enc := json.NewEncoder(s.out)
		enc.SetIndent("", "  ")
		return enc.Encode(list)
	}
	if len(list) == 0 {
		s.printf("no blobs in %s; put one with `mesh-release blob put FILE`\n", b.names().Blobs())
		return nil
	}
	tw := tabwriter.NewWriter(s.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "BLOB\tSIZE\tPUT")
	for _, bl := range list {
		fmt.Fprintf(tw, "%s\t%d\t%s\n", shownPath(bl.Name), bl.Size, bl.Modified)
	}
	return tw.Flush()
}

// shownPath is a path as given on the command line, made printable and bounded.
func shownPath(p string) string { return text.Cut(text.Printable(p), 256) }
