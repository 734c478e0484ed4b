package wire

import (
	"encoding/json"
	"fmt"

	"golang.org/x/mod/semver"
)

// Target is the value under KV mesh_host_targets keys "node.<id>" and "fleet": the host
// version a node should run.
type Target struct {
	Version string `json:"version"`
}

// ParseTarget decodes a target strictly and checks that it names a semantic version.
func ParseTarget(b []byte) (Target, error) {
	var t Target
	if err := decodeStrict(b, &t); err != nil {
		return Target{}, fmt.Errorf("target: %w", err)
	}
	if !semver.IsValid(t.Version) || t.Version != semver.Canonical(t.Version) && semver.Build(t.Version) == "" {
		return Target{}, fmt.Errorf("target: version %q is not a semantic version like v1.4.0", t.Version)
	}
	return t, nil
}

// Marshal returns the target's JSON.
func (t Target) Marshal() []byte { b, _ := json.Marshal(t); return b }
