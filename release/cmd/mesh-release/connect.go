package main

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats.go"

	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/release/trust"
)

// A command that cannot reach the bus says what to change, as the host's link does
// (host/link/failures.go): NATS's own words say only what went wrong. The fix is said after
// them, on the same line, naming the flag or variable to set and the file serve wrote.

// dial is how a command dials the bus, and where each part came from.
type dial struct {
	url, creds, ca    string
	credsFrom, caFrom string // the flag or variable it came from, as said to the operator
	data              string // serve's --data as far as this command knows it
	dataGiven         string // where data came from; "" for the default
}

// fromData is where credentials or a CA came from when a command took them from the trust
// store in serve's data directory (enrol-token, enrol-service, node revoke).
const fromData = "serve's --data"

// maxHintURL bounds the URL a hint repeats (it is said in full just before).
const maxHintURL = 256

func (d dial) connect(ctx context.Context, opts ...bus.ConnectOption) (*bus.Conn, error) {
	if err := d.check(); err != nil {
		return nil, err
	}
	c, err := bus.Connect(ctx, d.url, d.creds, append([]bus.ConnectOption{bus.WithCA(d.ca)}, opts...)...)
	if err != nil {
		return nil, d.explain(err)
	}
	return c, nil
}

// explain is err with what to change said after it, when it is one of the refusals a newcomer
// meets: no or other credentials, a CA that did not sign the bus's certificate, nothing
// listening at the URL.
func (d dial) explain(err error) error {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var hint string
	switch {
	case errors.Is(err, nats.ErrAuthorization) && d.credsFrom == fromData:
		hint = fmt.Sprintf("this bus refused the credentials in %s: is %s the --data of the serve that runs this bus (or give --creds FILE)?",
			d.creds, d.dataDir())
	case errors.Is(err, nats.ErrAuthorization) && d.creds == "":
		hint = fmt.Sprintf("no credentials were given: pass --creds FILE (or set %s) with the admin.creds `mesh-release serve` wrote, %s",
			envNATSCreds, d.serveFile(trust.Dir, trust.AdminCredsFile))
	case errors.Is(err, nats.ErrAuthorization):
		hint = fmt.Sprintf("this bus refused the credentials in %s (%s): give the admin.creds of the serve that runs this bus, %s",
			d.creds, d.credsFrom, d.serveFile(trust.Dir, trust.AdminCredsFile))
	case errors.As(err, &unknown) && d.caFrom == fromData:
		hint = fmt.Sprintf("the CA in %s did not sign the bus's TLS certificate: is %s the --data of the serve that runs this bus (or give --ca FILE)?",
			d.ca, d.dataDir())
	case errors.As(err, &unknown) && d.ca == "":
		hint = fmt.Sprintf("this command does not trust the CA of the bus's TLS certificate: pass --ca FILE (or set %s) with the ca.pem `mesh-release serve` made, %s",
			envNATSCA, d.serveFile(trust.TLSDir, trust.CAFile))
	case errors.As(err, &unknown):
		hint = fmt.Sprintf("the CA in %s (%s) did not sign the bus's TLS certificate: give the ca.pem of the serve that runs this bus, %s",
			d.ca, d.caFrom, d.serveFile(trust.TLSDir, trust.CAFile))
	case errors.As(err, &host):
		hint = "the bus's TLS certificate does not name the host in the URL: dial a name it names (serve's `TLS:` line lists them), or give serve that name with --tls-name"
	case errors.Is(err, nats.ErrNoServers), errors.Is(err, syscall.ECONNREFUSED):
		url := d.url
		if url == "" {
			url = bus.DefaultURL
		}
		hint = fmt.Sprintf("nothing answers at %s: is `mesh-release serve` running, and is that its URL (--nats, else $%s; serve's first line says where it serves)?",
			text.Cut(text.Redact(url), maxHintURL), envNATSURL)
	default:
		return err
	}
	return fmt.Errorf("%w; %s", err, hint)
}

// check refuses, before dialling, what would otherwise fail later and less clearly: a
// credentials or CA file that is not there (NATS names the file but not who named it), and a
// node's or an enrolment token's credentials, which the bus accepts and then refuses every
// request of, first as permission violations and then as a timeout.
func (d dial) check() error {
	if d.ca != "" {
		if err := present(d.ca, "CA file", d.caFrom); err != nil {
			return fmt.Errorf("%w; give the ca.pem of the serve that runs this bus, %s", err, d.serveFile(trust.TLSDir, trust.CAFile))
		}
	}
	if d.creds == "" {
		return nil
	}
	if err := present(d.creds, "credentials file", d.credsFrom); err != nil {
		return fmt.Errorf("%w; give the admin.creds of the serve that runs this bus, %s", err, d.serveFile(trust.Dir, trust.AdminCredsFile))
	}
	if whose := credsOf(d.creds); whose != "" {
		return fmt.Errorf("the credentials in %s (%s) are %s, not the release side's admin.creds, which this command needs: give the admin.creds of the serve that runs this bus, %s",
			d.creds, d.credsFrom, whose, d.serveFile(trust.Dir, trust.AdminCredsFile))
	}
	return nil
}

// present says, when path cannot be opened, that it is missing and which flag or variable
// named it.
func present(path, what, from string) error {
	f, err := os.Open(path)
	if err == nil {
		return f.Close()
	}
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("the %s %s (given by %s) does not exist", what, path, from)
	}
	return fmt.Errorf("the %s %s (given by %s) cannot be read: %w", what, path, from, err)
}

// maxCredsFile bounds what credsOf reads of a credentials file: a .creds is about 1 KiB.
const maxCredsFile = 64 << 10

// credsOf is whose the credentials file at path are when they are a node's or an enrolment
// token's ("node web-01's node.creds"), by the tags the enrolment service gives those users;
// "" for any other, and for a file it cannot read as .creds (NATS then says what is wrong).
func credsOf(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxCredsFile))
	if err != nil {
		return ""
	}
	token, err := jwt.ParseDecoratedJWT(b)
	if err != nil {
		return ""
	}
	uc, err := jwt.DecodeUserClaims(token)
	if err != nil {
		return ""
	}
	switch {
	case uc.Tags.Contains(trust.NodeTag):
		return fmt.Sprintf("node %s's (the node.creds `mesh-host enrol` wrote)", printable(uc.Name))
	case uc.Tags.Contains(trust.TokenTag):
		return "an enrolment token's (they may only ask to enrol)"
	}
	return ""
}

// dataDir is the data directory and where it came from: "/srv/mesh (from --data)".
func (d dial) dataDir() string {
	if d.dataGiven == "" {
		return d.data + " (the default)"
	}
	return d.data + " (from " + d.dataGiven + ")"
}

// serveFile names serve's DATA/dir/name: in the directory this command was told of, or in the
// default one, saying that another --data of serve's moves it.
func (d dial) serveFile(dir, name string) string {
	path := filepath.Join(d.data, dir, name)
	if d.dataGiven != "" {
		return fmt.Sprintf("%s (serve's --data, from %s)", path, d.dataGiven)
	}
	return fmt.Sprintf("%s, or DIR/%s/%s for serve's --data DIR (serve prints the path)", path, dir, name)
}
