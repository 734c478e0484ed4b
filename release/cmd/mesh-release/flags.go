package main

import (
	"context"
	"errors"
	"flag"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
)

// The environment a bus command reads when its flag is not given, so that an operator sets the
// bus once per shell instead of on every command.
const (
	envNATSURL   = "MESH_NATS_URL"
	envNATSCreds = "MESH_NATS_CREDS"
	envNATSCA    = "MESH_NATS_CA"

	envReleaseKey  = "MESH_RELEASE_KEY"  // --key: the key that signs (release.key)
	envReleaseData = "MESH_RELEASE_DATA" // --data: serve's directory
)

// busFlags are the flags every command that uses an existing bus takes.
type busFlags struct {
	url, creds, ca, prefix string
	getenv                 func(string) string
}

// register adds --nats, --creds, --ca and --prefix to fs. Their defaults are empty so that help never
// prints a URL or path taken from the environment (a URL may carry a password); connect applies
// flag, then environment, then default.
func (b *busFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	b.getenv = getenv
	fs.StringVar(&b.url, "nats", "", "NATS `URL`, comma-separated for a cluster (default $"+envNATSURL+", else "+bus.DefaultURL+")")
	fs.StringVar(&b.creds, "creds", "", "NATS credentials `FILE` (.creds) (default $"+envNATSCreds+")")
	fs.StringVar(&b.ca, "ca", "", "CA certificate `FILE` (PEM) to trust for the bus's TLS, such as serve's DIR/tls/ca.pem (default $"+envNATSCA+", else the system's)")
	fs.StringVar(&b.prefix, "prefix", wire.DefaultPrefix, "prefix of the mesh's bus names")
}

func (b *busFlags) names() wire.Names { return wire.NamesFor(b.prefix) }

// connect dials the bus the flags (or the environment) name.
func (b *busFlags) connect(ctx context.Context, opts ...bus.ConnectOption) (*bus.Conn, error) {
	return b.dial().connect(ctx, opts...)
}

// dial is what connect dials: each of --nats, --creds and --ca, else its variable.
func (b *busFlags) dial() dial {
	d := dial{url: b.url, creds: b.creds, ca: b.ca, credsFrom: "--creds", caFrom: "--ca"}
	d.url = b.env(d.url, envNATSURL)
	d.creds, d.credsFrom = b.envFrom(d.creds, d.credsFrom, envNATSCreds)
	d.ca, d.caFrom = b.envFrom(d.ca, d.caFrom, envNATSCA)
	d.data, d.dataGiven = b.envFrom("", "", envReleaseData)
	if d.data == "" {
		d.data = defaultDataDir
	}
	return d
}

// env is v, else the variable name's value.
func (b *busFlags) env(v, name string) string {
	v, _ = b.envFrom(v, "", name)
	return v
}

// envFrom is v and from, else the variable name's value and "$name" (v stays empty without
// either).
func (b *busFlags) envFrom(v, from, name string) (string, string) {
	if v != "" || b.getenv == nil {
		return v, from
	}
	if e := b.getenv(name); e != "" {
		return e, "$" + name
	}
	return "", from
}

// parseArgs parses flags wherever they appear among the positional arguments, so that both
// `declare --nats URL n1 f.json` and `declare n1 f.json --nats URL` work. It returns
// flag.ErrHelp for -h and --help, and a usageError for a bad flag.
func parseArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err
			}
			return nil, usageError{err.Error()}
		}
		args = fs.Args()
		if len(args) == 0 {
			return pos, nil
		}
		if args[0] == "--" {
			return append(pos, args[1:]...), nil
		}
		pos, args = append(pos, args[0]), args[1:]
	}
}

// noArgs parses args for a command that takes flags only.
func noArgs(fs *flag.FlagSet, args []string) error {
	pos, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 0 {
		return usagef("unexpected %s %q; this command takes flags only", text.Plural(len(pos), "argument", "arguments"), pos)
	}
	return nil
}
