package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// ArchiveReads counts reads of release archives from the object store, as the server sees them.
// A node reads an object with direct gets of its chunks, one request each on the stream's
// direct-get subject, $JS.API.DIRECT.GET.OBJ_<bucket>, whose body names the chunk subject
// ($O.<bucket>.C.<the object's nuid>) and the sequence to look from: a read starts with the
// request from sequence 1 (internal/objfetch). The lab listens, with core subscriptions, to two
// real signals:
//
//   - those requests, whose body says which object is read (Count); and
//   - the server's advisories that it created a consumer on the archives' stream,
//     $JS.EVENT.ADVISORY.CONSUMER.CREATED.OBJ_<bucket>.<name> (Created): a node creates none,
//     so a read must announce none.
//
// Nothing of the host or the release tool is changed to be counted.
type ArchiveReads struct {
	nc     *nats.Conn
	names  wire.Names
	stream string
	subs   []*nats.Subscription

	mu       sync.Mutex
	requests []string // the chunk subject of each read's first direct get, in order
	created  int      // advisories: consumers the server created on the stream
}

// CountArchiveReads starts counting on nc; the subscriptions are in place when it returns.
func CountArchiveReads(nc *nats.Conn, names wire.Names) (*ArchiveReads, error) {
	r := &ArchiveReads{nc: nc, names: names, stream: "OBJ_" + names.Archives()}
	for _, subject := range []string{"$JS.API.DIRECT.GET." + r.stream, "$JS.EVENT.ADVISORY.CONSUMER.CREATED." + r.stream + ".>"} {
		sub, err := nc.Subscribe(subject, r.saw)
		if err != nil {
			r.Stop()
			return nil, fmt.Errorf("subscribe to %s: %w", subject, err)
		}
		sub.SetPendingLimits(-1, -1)
		r.subs = append(r.subs, sub)
	}
	if err := nc.Flush(); err != nil {
		r.Stop()
		return nil, err
	}
	return r, nil
}

func (r *ArchiveReads) saw(m *nats.Msg) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if strings.HasPrefix(m.Subject, "$JS.EVENT.") {
		r.created++
		return
	}
	var req struct {
		Seq  uint64 `json:"seq"`
		Next string `json:"next_by_subj"`
	}
	if json.Unmarshal(m.Data, &req) != nil || req.Seq != 1 || req.Next == "" {
		return // a later chunk of a read already counted
	}
	r.requests = append(r.requests, req.Next)
}

// Count is how many times a host archive of version has been read so far: the archive of each
// platform its published manifest lists, added up. (The objects are found from the manifest, not
// by listing the store: a listing is a consumer, which Created counts.)
func (r *ArchiveReads) Count(ctx context.Context, version string) (int, error) {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return 0, err
	}
	kv, err := js.KeyValue(ctx, r.names.Releases())
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", r.names.Releases(), err)
	}
	e, err := kv.Get(ctx, version)
	if err != nil {
		return 0, fmt.Errorf("the manifest of %s in %s: %w", version, r.names.Releases(), err)
	}
	m, err := wire.ParseManifest(e.Value())
	if err != nil {
		return 0, fmt.Errorf("the manifest of %s: %w", version, err)
	}
	obs, err := js.ObjectStore(ctx, r.names.Archives())
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", r.names.Archives(), err)
	}
	chunks := map[string]bool{}
	for _, p := range m.PlatformList() {
		b, err := m.For(p)
		if err != nil {
			return 0, err
		}
		info, err := obs.GetInfo(ctx, b.Object)
		if err != nil {
			return 0, fmt.Errorf("object %s: %w", b.Object, err)
		}
		chunks["$O."+r.names.Archives()+".C."+info.NUID] = true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, filter := range r.requests {
		if chunks[filter] {
			n++
		}
	}
	return n, nil
}

// Created is how many consumers the server announced it created on the archives' stream, for
// any object: none for the nodes' reads, which use direct gets.
func (r *ArchiveReads) Created() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.created
}

// Stop ends the counting.
func (r *ArchiveReads) Stop() {
	for _, s := range r.subs {
		s.Unsubscribe()
	}
}
