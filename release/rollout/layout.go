package rollout

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/novox/mesh-host/release/bus"
)

// How a rollout lies in the rollouts bucket (decision 0021, docs/wire.md "mesh_rollouts").
//
// The head, under rollout.<id>, is the State without its node list: status, batches, left-out
// nodes, halt, lease. Every write a controller makes — taking over, renewing, starting or ending
// a batch, halting, completing — and every write of an abort or a supersede is a
// compare-and-set of the head alone, so one controller acts, as with the single value before.
//
// The node list (Nodes and Ran, what never changes once planned) is cut into chunks under
// nodes.<id>.<n>, n from 0, each at most bus.RolloutChunkBytes. They are created before the
// head that names them (node_list: how many chunks, how many nodes, the SHA-256 of their values
// in order), and never written again: a reader that sees the head finds its chunks, and a chunk
// that is not the one the head was written with is refused by its digest.
//
// A head of schema 1 (every state written before 0021) holds nodes and ran itself; it is read
// as it is, and written back in the chunked form by the first write of a newer controller.

// schemaOneValue is the schema of a state held as one value, nodes included (before 0021).
const schemaOneValue = 1

// chunkKey names chunk k of rollout id's node list. Not under rollout.>, which lists the heads.
func chunkKey(id string, k int) string { return "nodes." + id + "." + strconv.Itoa(k) }

// nodeList is what a head says of its node list.
type nodeList struct {
	Chunks int    `json:"chunks"`
	Nodes  int    `json:"nodes"`
	SHA256 string `json:"sha256"` // of the chunks' values, one after the other
}

// head is the value under rollout.<id>: the state, with nodes and ran (which shadow State's in
// JSON) left out when NodeList names the chunks holding them.
type head struct {
	State
	Nodes    []string  `json:"nodes,omitempty"`
	Ran      []string  `json:"ran,omitempty"`
	Readers  []bool    `json:"readers,omitempty"`
	NodeList *nodeList `json:"node_list,omitempty"`
}

// chunk is the value under nodes.<id>.<n>: Nodes[i] ran Ran[i], for a run of the rollout's nodes,
// and Readers[i] says whether it reads plans (schema 3; absent when no node of the rollout does).
type chunk struct {
	Rollout string   `json:"rollout"`
	Index   int      `json:"index"`
	Nodes   []string `json:"nodes"`
	Ran     []string `json:"ran"`
	Readers []bool   `json:"readers,omitempty"`
}

// cached is a node list a store has written or read (and checked), by rollout id.
type cached struct {
	list       nodeList
	nodes, ran []string
	readers    []bool
}

// chunkOverhead is room in a chunk for everything but its node ids and versions.
const chunkOverhead = 512

// splitNodes cuts the node list of st into chunk values of at most bus.RolloutChunkBytes and
// says what the head will name.
func splitNodes(st State) ([][]byte, nodeList, error) {
	if len(st.Ran) != len(st.Nodes) {
		return nil, nodeList{}, fmt.Errorf("rollout %s lists %d nodes but %d versions they ran", st.ID, len(st.Nodes), len(st.Ran))
	}
	if st.Readers != nil && len(st.Readers) != len(st.Nodes) {
		return nil, nodeList{}, fmt.Errorf("rollout %s lists %d nodes but says of %d whether they read plans", st.ID, len(st.Nodes), len(st.Readers))
	}
	var values [][]byte
	h := sha256.New()
	c := chunk{Rollout: st.ID, Nodes: []string{}, Ran: []string{}}
	size := chunkOverhead + len(st.ID)
	flush := func() error {
		c.Index = len(values)
		b, err := json.Marshal(c)
		if err != nil {
			return err
		}
		if len(b) > bus.RolloutChunkBytes {
			return fmt.Errorf("a chunk of rollout %s's node list is %d bytes, over the %d allowed", st.ID, len(b), bus.RolloutChunkBytes)
		}
		values = append(values, b)
		h.Write(b)
		c.Nodes, c.Ran, c.Readers, size = []string{}, []string{}, nil, chunkOverhead+len(st.ID)
		return nil
	}
	for i, n := range st.Nodes {
		// Each string as JSON writes it (quotes, escapes) and a comma.
		need := jsonLen(n) + jsonLen(st.Ran[i]) + 2
		if st.Readers != nil {
			need += len("false,")
		}
		if need+chunkOverhead+len(st.ID) > bus.RolloutChunkBytes {
			return nil, nodeList{}, fmt.Errorf("rollout %s: node %q with version %q does not fit a chunk of %d bytes", st.ID, text(n), text(st.Ran[i]), bus.RolloutChunkBytes)
		}
		if size+need > bus.RolloutChunkBytes && len(c.Nodes) > 0 {
			if err := flush(); err != nil {
				return nil, nodeList{}, err
			}
		}
		c.Nodes, c.Ran = append(c.Nodes, n), append(c.Ran, st.Ran[i])
		if st.Readers != nil {
			c.Readers = append(c.Readers, st.Readers[i])
		}
		size += need
	}
	if len(c.Nodes) > 0 {
		if err := flush(); err != nil {
			return nil, nodeList{}, err
		}
	}
	if len(values) > bus.MaxRolloutChunks {
		return nil, nodeList{}, fmt.Errorf("a rollout to %d nodes needs %d chunks of its node list, over the %d a head may name: roll out to part of the fleet with a shorter --alive, or split the fleet across prefixes",
			len(st.Nodes), len(values), bus.MaxRolloutChunks)
	}
	return values, nodeList{Chunks: len(values), Nodes: len(st.Nodes), SHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// jsonLen is the length of s as a JSON string: plain printable ASCII is s with its quotes;
// anything else is measured by encoding it.
func jsonLen(s string) int {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			b, _ := json.Marshal(s)
			return len(b)
		}
	}
	return len(s) + 2
}

// encodeHead is the head of st naming list.
func encodeHead(st State, list nodeList) ([]byte, error) {
	st.Schema, st.Nodes, st.Ran, st.Readers = Schema, nil, nil, nil
	b, err := json.Marshal(head{State: st, NodeList: &list})
	if err != nil {
		return nil, err
	}
	if len(b) > bus.MaxRolloutBytes {
		return nil, fmt.Errorf("rollout %s: its head is %d bytes, over the %d the bucket holds", st.ID, len(b), bus.MaxRolloutBytes)
	}
	return b, nil
}

// headSize is about how many bytes st's head takes (the digest and counts at their longest).
func headSize(st State) int {
	st.Schema, st.Nodes, st.Ran, st.Readers = Schema, nil, nil, nil
	b, _ := json.Marshal(head{State: st, NodeList: &nodeList{Chunks: bus.MaxRolloutChunks, Nodes: 1 << 40, SHA256: strings.Repeat("0", 64)}})
	return len(b)
}

// decodeHead reads a head; list is nil when it holds its node list itself (schema 1, or a head
// written without chunks).
func decodeHead(b []byte) (State, *nodeList, error) {
	var h head
	if err := json.Unmarshal(b, &h); err != nil {
		return State{}, nil, fmt.Errorf("unreadable rollout state: %w", err)
	}
	st := h.State
	st.Nodes, st.Ran, st.Readers = h.Nodes, h.Ran, h.Readers
	switch {
	case st.Schema == schemaOneValue && h.NodeList != nil:
		return State{}, nil, errors.New("rollout state of schema 1 names a chunked node list, which schema 1 never does")
	case st.Schema < schemaOneValue || st.Schema > Schema:
		return State{}, nil, fmt.Errorf("rollout state of schema %d; this tool reads schemas %d to %d", st.Schema, schemaOneValue, Schema)
	}
	if l := h.NodeList; l != nil {
		if len(st.Nodes) > 0 || len(st.Ran) > 0 {
			return State{}, nil, errors.New("rollout state holds nodes itself and names chunks of them too")
		}
		if l.Chunks < 0 || l.Chunks > bus.MaxRolloutChunks || l.Nodes < 0 || (l.Chunks == 0) != (l.Nodes == 0) {
			return State{}, nil, fmt.Errorf("rollout state names %d chunks of %d nodes (at most %d chunks)", l.Chunks, l.Nodes, bus.MaxRolloutChunks)
		}
	}
	return st, h.NodeList, nil
}

// check refuses a state whose parts do not agree: every batch ends within the node list, in
// order, and the batch in progress is one of them.
func check(st State) (State, error) {
	if len(st.Ran) != len(st.Nodes) {
		return State{}, fmt.Errorf("rollout state lists %d nodes but %d versions they ran", len(st.Nodes), len(st.Ran))
	}
	end := 0
	for _, b := range st.Batches {
		if b.End < end || b.End > len(st.Nodes) {
			return State{}, fmt.Errorf("rollout state has a batch ending at %d of %d nodes", b.End, len(st.Nodes))
		}
		end = b.End
	}
	if st.Current < 0 || st.Current > len(st.Batches) {
		return State{}, fmt.Errorf("rollout state is at batch %d of %d", st.Current, len(st.Batches))
	}
	return st, nil
}

// writeNodes makes sure the chunks of st's node list are in the bucket and returns what its
// head names. Each chunk is created (a compare-and-set on no value): one already there with the
// same bytes is this list written before (by this controller, or by another writing the same
// list); one with other bytes is another rollout's start under the same id, errConflict.
func (s *store) writeNodes(ctx context.Context, st State) (nodeList, error) {
	if c, ok := s.cachedNodes(st.ID); ok && c.list.Nodes == len(st.Nodes) {
		return c.list, nil
	}
	values, list, err := splitNodes(st)
	if err != nil {
		return nodeList{}, err
	}
	err = each(ctx, chunkWorkers, len(values), func(ctx context.Context, k int) error {
		_, err := s.save(ctx, s.rollouts, chunkKey(st.ID, k), values[k], 0)
		return err
	})
	if err != nil {
		return nodeList{}, err
	}
	s.keepNodes(st.ID, cached{list: list, nodes: st.Nodes, ran: st.Ran, readers: st.Readers})
	return list, nil
}

// chunkWorkers is how many chunks are written or read at once.
const chunkWorkers = 4

// readNodes reads the node list a head names into st, from the store's cache when it has read
// or written that very list before.
func (s *store) readNodes(ctx context.Context, st State, list nodeList) (State, error) {
	if c, ok := s.cachedNodes(st.ID); ok && c.list == list {
		st.Nodes, st.Ran, st.Readers = c.nodes, c.ran, c.readers
		return st, nil
	}
	values := make([][]byte, list.Chunks)
	err := each(ctx, chunkWorkers, list.Chunks, func(ctx context.Context, k int) error {
		e, ok, err := s.entry(ctx, s.rollouts, chunkKey(st.ID, k))
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("%s is missing from %s; the head names %d chunks", chunkKey(st.ID, k), s.n.Rollouts(), list.Chunks)
		}
		values[k] = e.Value()
		return nil
	})
	if err != nil {
		return State{}, err
	}
	h := sha256.New()
	nodes, ran := make([]string, 0, list.Nodes), make([]string, 0, list.Nodes)
	var readers []bool
	for k, v := range values {
		h.Write(v)
		var c chunk
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&c); err != nil {
			return State{}, fmt.Errorf("%s in %s is unreadable: %w", chunkKey(st.ID, k), s.n.Rollouts(), err)
		}
		if c.Rollout != st.ID || c.Index != k || len(c.Nodes) != len(c.Ran) || len(nodes)+len(c.Nodes) > list.Nodes ||
			(c.Readers != nil && len(c.Readers) != len(c.Nodes)) {
			return State{}, fmt.Errorf("%s in %s is not chunk %d of rollout %s's %d nodes", chunkKey(st.ID, k), s.n.Rollouts(), k, text(st.ID), list.Nodes)
		}
		nodes, ran = append(nodes, c.Nodes...), append(ran, c.Ran...)
		if c.Readers != nil {
			readers = append(readers, c.Readers...)
		}
	}
	if readers != nil && len(readers) != len(nodes) {
		return State{}, fmt.Errorf("the node list of rollout %s in %s says of %d of its %d nodes whether they read plans", text(st.ID), s.n.Rollouts(), len(readers), len(nodes))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != list.SHA256 || len(nodes) != list.Nodes {
		return State{}, fmt.Errorf("the node list of rollout %s in %s is not the one its head was written with (sha256 %s, %d nodes; the head names %s, %d)",
			text(st.ID), s.n.Rollouts(), got, len(nodes), text(list.SHA256), list.Nodes)
	}
	st.Nodes, st.Ran, st.Readers = nodes, ran, readers
	s.keepNodes(st.ID, cached{list: list, nodes: nodes, ran: ran, readers: readers})
	return st, nil
}

func (s *store) cachedNodes(id string) (cached, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, ok := s.lists[id]
	return c, ok
}

func (s *store) keepNodes(id string, c cached) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lists == nil {
		s.lists = make(map[string]cached)
	}
	s.lists[id] = c
}

// purge removes rollout id, head and chunks (best effort: a start that lost the race).
func (s *store) purge(ctx context.Context, id string) {
	_ = s.rollouts.Purge(ctx, stateKey(id))
	if c, ok := s.cachedNodes(id); ok {
		for k := range c.list.Chunks {
			_ = s.rollouts.Purge(ctx, chunkKey(id, k))
		}
	}
}
