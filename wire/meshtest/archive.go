package meshtest

import (
	"archive/tar"
	"bytes"
	"fmt"

	"github.com/klauspost/compress/zstd"
)

// An Entry is one member of a hand-made tar: its header, and the body written after it.
type Entry struct {
	Header tar.Header
	Body   []byte
}

// File is a regular file entry named name holding body, mode 0755.
func File(name string, body []byte) Entry {
	return Entry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o755, Size: int64(len(body))}, body}
}

// Archive writes entries as a tar inside one zstd stream, then trailer: raw bytes inside the
// zstd stream after the tar's end (nil for none). opts configure the encoder. It builds what
// archive.Pack never writes: other names, links, devices, a second entry, data after the end.
// It panics if tar or zstd refuse what it is given; that is a mistake in the test.
func Archive(entries []Entry, trailer []byte, opts ...zstd.EOption) []byte {
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf, opts...)
	if err != nil {
		panic(fmt.Sprintf("meshtest.Archive: %v", err))
	}
	tw := tar.NewWriter(zw)
	for _, e := range entries {
		h := e.Header
		if err := tw.WriteHeader(&h); err != nil {
			panic(fmt.Sprintf("meshtest.Archive: entry %q: %v", h.Name, err))
		}
		if _, err := tw.Write(e.Body); err != nil {
			panic(fmt.Sprintf("meshtest.Archive: entry %q: %v", h.Name, err))
		}
	}
	if err := tw.Close(); err != nil {
		panic(fmt.Sprintf("meshtest.Archive: %v", err))
	}
	if _, err := zw.Write(trailer); err != nil {
		panic(fmt.Sprintf("meshtest.Archive: %v", err))
	}
	if err := zw.Close(); err != nil {
		panic(fmt.Sprintf("meshtest.Archive: %v", err))
	}
	return buf.Bytes()
}
