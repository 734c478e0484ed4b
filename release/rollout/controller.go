package rollout

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/novox/mesh-host/wire"
)

var errNotYet = errors.New("not implemented yet")

// Config is what a Controller needs; the zero values of the optional fields are defaults.
type Config struct {
	JS       jetstream.JetStream
	Names    wire.Names
	Events   func(Event)   // called from one goroutine at a time; nil: none
	Log      *slog.Logger  // nil: discard
	Lease    time.Duration // default DefaultLease
	Progress time.Duration // 0: no EventProgress; else one progress event per this interval while a batch runs
	Tick     time.Duration // how often the current batch is judged besides on each heartbeat; default 250ms
	Workers  int           // targets set/deleted concurrently; default 32
	Holder   string        // optional extra text naming this controller (e.g. "watch")
}

// Controller drives rollouts on one bus.
type Controller struct {
	cfg Config
}

// New returns a controller for cfg.
func New(cfg Config) (*Controller, error) { return &Controller{cfg: cfg}, nil }

// Start plans and stores a rollout of o.Version.
func (c *Controller) Start(ctx context.Context, o Options) (State, error) { return State{}, errNotYet }

// Run drives rollout id until its status is final.
func (c *Controller) Run(ctx context.Context, id string) (State, error) { return State{}, errNotYet }

// Resume takes over the current rollout and runs it.
func (c *Controller) Resume(ctx context.Context) (State, error) { return State{}, errNotYet }

// Watch rolls out each newly announced release.
func (c *Controller) Watch(ctx context.Context, o Options) error { return errNotYet }

// Get reads rollout id.
func Get(ctx context.Context, js jetstream.JetStream, n wire.Names, id string) (State, error) {
	return State{}, errNotYet
}

// Current reads the rollout "current" names.
func Current(ctx context.Context, js jetstream.JetStream, n wire.Names) (st State, ok bool, err error) {
	return State{}, false, errNotYet
}

// Abort marks the current running rollout aborted.
func Abort(ctx context.Context, js jetstream.JetStream, n wire.Names, by string) (State, error) {
	return State{}, errNotYet
}

// WithDefaults returns o with every unset field at its default.
func (o Options) WithDefaults() Options { return o }

// Validate checks o, naming the flag at fault.
func (o Options) Validate() error { return nil }

// BatchNodes returns the nodes of batch i.
func (s State) BatchNodes(i int) []string { return nil }
