package archive_test

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/novox/mesh-host/wire/archive"
	"github.com/novox/mesh-host/wire/meshtest"
)

// A release packs the host binary; a host extracts it into a staging directory, getting the
// binary's size and digest hashed as it was written, and refuses an archive carrying anything
// else.
func ExampleExtract() {
	bin := []byte("#!/bin/sh\necho v1.4.0\n") // stands in for the mesh-host binary
	var packed bytes.Buffer
	if err := archive.Pack(&packed, bytes.NewReader(bin), int64(len(bin))); err != nil {
		fmt.Println(err)
		return
	}

	dir, err := os.MkdirTemp("", "staging-")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer os.RemoveAll(dir)
	got, err := archive.Extract(context.Background(), &packed, dir, archive.Limits{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fi, err := os.Stat(got.Path)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(filepath.Base(got.Path), got.Size, fi.Mode().Perm(), got.Digest)

	// An archive whose one entry is a symbolic link named mesh-host (meshtest.Archive writes
	// what Pack never would).
	evil := meshtest.Archive([]meshtest.Entry{{Header: tar.Header{Typeflag: tar.TypeSymlink, Name: "mesh-host", Linkname: "/bin/sh"}}}, nil)
	_, err = archive.Extract(context.Background(), bytes.NewReader(evil), dir, archive.Limits{})
	fmt.Println(err)
	fmt.Println("unsafe:", errors.Is(err, archive.ErrUnsafe))

	// Output:
	// mesh-host 22 -rwxr-xr-x sha256:ac45bc397221e770ff4d847fc6b32a9dc189fb787965156de10ade5d0f911973
	// refused host archive: entry "mesh-host" is a symlink to "/bin/sh"; a host archive holds a regular file named mesh-host, then at most one named mesh-launcher
	// unsafe: true
}
