package lab

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

// ArchiveReads counts reads of release archives from the object store, as the server sees them.
// Reading an object is creating a consumer on its chunks: nats.go's object Get subscribes with
// an ordered consumer filtered on $O.<bucket>.C.<the object's nuid>, through the consumer-create
// API of the bucket's stream. The lab listens, with core subscriptions, to two real signals:
//
//   - the create requests, $JS.API.CONSUMER.CREATE.OBJ_<bucket>[.…], whose body carries the
//     filter subject, so which object is read (Count); and
//   - the server's advisories that it created a consumer on that stream,
//     $JS.EVENT.ADVISORY.CONSUMER.CREATED.OBJ_<bucket>.<name> (Created). An ordered consumer is
//     created unnamed (the server names it), so an advisory cannot be tied to an object: it is
//     the cross-check that each request did create a consumer.
//
// An ordered consumer that resets (after a lost connection) asks again: that is another read.
// Nothing of the host or the release tool is changed to be counted.
type ArchiveReads struct {
	nc     *nats.Conn
	names  wire.Names
	stream string
	subs   []*nats.Subscription

	mu       sync.Mutex
	requests []string // the filter subject of each create request, in order
	created  int      // advisories: consumers the server created on the stream
}

// CountArchiveReads starts counting on nc; the subscriptions are in place when it returns.
func CountArchiveReads(nc *nats.Conn, names wire.Names) (*ArchiveReads, error) {
	r := &ArchiveReads{nc: nc, names: names, stream: "OBJ_" + names.Archives()}
	api := "$JS.API.CONSUMER.CREATE." + r.stream
	for _, subject := range []string{api, api + ".>", "$JS.EVENT.ADVISORY.CONSUMER.CREATED." + r.stream + ".>"} {
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
		Config struct {
			Filter  string   `json:"filter_subject"`
			Filters []string `json:"filter_subjects"`
		} `json:"config"`
	}
	if json.Unmarshal(m.Data, &req) != nil {
		return
	}
	filter := req.Config.Filter
	if filter == "" && len(req.Config.Filters) == 1 {
		filter = req.Config.Filters[0]
	}
	r.requests = append(r.requests, filter)
}

// Count is how many times the archive of version (for this machine's platform, as the lab
// builds it) has been read so far.
func (r *ArchiveReads) Count(ctx context.Context, version string) (int, error) {
	js, err := jetstream.New(r.nc)
	if err != nil {
		return 0, err
	}
	obs, err := js.ObjectStore(ctx, r.names.Archives())
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", r.names.Archives(), err)
	}
	object := wire.ObjectName(version, runtime.GOOS, runtime.GOARCH)
	info, err := obs.GetInfo(ctx, object)
	if err != nil {
		return 0, fmt.Errorf("object %s: %w", object, err)
	}
	chunks := "$O." + r.names.Archives() + ".C." + info.NUID
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, filter := range r.requests {
		if filter == chunks {
			n++
		}
	}
	return n, nil
}

// Created is how many consumers the server announced it created on the archives' stream, for
// any object: every read, and anything else that consumed the stream.
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
