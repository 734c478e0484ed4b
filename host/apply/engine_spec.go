package apply

import (
	"bytes"
	"encoding/json"

	"github.com/novox/mesh-host/wire"
)

// ParseSpec decodes a resource's raw spec into its kind's spec type (*wire.FileSpec for
// "file", …), strictly and checked, with the fields that default to the id filled in: the
// declaration's parser normally sets Resource.Parsed already; the engine uses this for a
// resource that arrives without it, and the store for the specs it recorded.
func ParseSpec(kind, id string, raw json.RawMessage) (any, error) {
	return wire.ParseSpec(kind, id, raw, "")
}

// sameSpec says whether two raw specs are the same, spaces aside. The raw spec is what the
// ledger records and compares, not the parsed one (the parser fills in defaults, and another
// version's parser may fill in others); a spec re-sent with its keys in another order reads as
// changed — applied again, never as drift.
func sameSpec(a, b json.RawMessage) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var ca, cb bytes.Buffer
	if json.Compact(&ca, a) != nil || json.Compact(&cb, b) != nil {
		return false
	}
	return bytes.Equal(ca.Bytes(), cb.Bytes())
}

// specPaths are the paths a resource's spec names on the machine (a directory, file or
// archive's path, defaulting to its id), for the Guard.
func specPaths(r wire.Resource) []string {
	pick := func(p string) []string {
		if p == "" {
			p = r.ID
		}
		return []string{p}
	}
	switch s := r.Parsed.(type) {
	case *wire.DirectorySpec:
		return pick(s.Path)
	case *wire.FileSpec:
		return pick(s.Path)
	case *wire.ArchiveSpec:
		return pick(s.Path)
	}
	return nil
}
