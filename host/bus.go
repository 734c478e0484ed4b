package host

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/novox/mesh-host/host/config"
	"github.com/novox/mesh-host/host/link"
	"github.com/novox/mesh-host/host/store"
	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/wire"
)

// The bus configuration (decision 0046): the CAs this node trusts for the bus's TLS and the
// bus's URLs, signed under the targets role, followed over the link. An accepted one is applied
// without a restart: its CAs are written to the node's CA file (nats_ca), which the link reads
// at every connection attempt, and its URLs to host.json's nats_urls, which the host dials from
// its next start (nats.go v1.55 has no way to change a connection's server list). A document
// that is invalid, unsigned, expired, a replay, or whose CAs would not verify the server this
// node is connected to now is refused (refused.what "bus") and changes nothing.

// BusWhat is the kind of signed value the store keeps the bus configuration's seq for.
const BusWhat = "bus"

// busTrust is what a bus configuration is verified with: the trust the host holds now (its
// roots, else host.json's target keys).
func (h *Host) busTrust() wire.Trust { return h.trustNow() }

// signatureText is a document's signatures as one string, what the store compares to tell the
// same document from other content under the same seq.
func signatureText(list []wire.Signature) string {
	parts := make([]string, len(list))
	for i, s := range list {
		parts[i] = s.KeyID + ":" + s.Signature
	}
	return strings.Join(parts, ",")
}

// busArrived verifies the bus configuration the link reports and, if it is accepted, applies
// it.
func (h *Host) busArrived(ctx context.Context, ev link.BusArrived) {
	const keep = "this node keeps its CA file and bus URLs as they are"
	if ev.Deleted {
		h.log.Info("the bus configuration was deleted on the bus; " + keep)
		return
	}
	d, err := wire.ParseBus(ev.Value)
	if err != nil {
		h.refuse(ctx, BusWhat, ev.Revision, fmt.Sprintf("%v; %s", err, keep))
		return
	}
	what := fmt.Sprintf("bus configuration seq %d", d.Seq)
	env := d.Envelope()
	now := h.now()
	if err := h.busTrust().Verify(env, now); err != nil {
		h.refuse(ctx, BusWhat, ev.Revision, fmt.Sprintf("%s refused: %v; %s", what, err, keep))
		return
	}
	sig := signatureText(env.Signatures)
	prev, ok, err := h.store.Accepted(ctx, BusWhat, wire.BusKey)
	if err != nil {
		h.log.Error("could not read the bus configuration accepted last; it is judged when it arrives again", "err", err)
		return
	}
	applied := ok && prev.Seq == d.Seq && prev.Signature == sig
	if !applied && env.ExpiredAt(now) {
		h.refuse(ctx, BusWhat, ev.Revision, fmt.Sprintf("%s refused: it expired at %s; %s", what, d.Expires, keep))
		return
	}
	if err := h.checkBus(ctx, d); err != nil {
		h.refuse(ctx, BusWhat, ev.Revision, fmt.Sprintf("%s refused: %v; %s", what, err, keep))
		return
	}
	same, err := h.store.AcceptSigned(ctx, BusWhat, wire.BusKey, d.Seq, sig)
	switch {
	case errors.Is(err, store.ErrReplay), errors.Is(err, store.ErrSeqReused), errors.Is(err, store.ErrSeqAhead):
		h.refuse(ctx, BusWhat, ev.Revision, fmt.Sprintf("%s refused: %v; %s", what, err, keep))
		return
	case err != nil && ctx.Err() != nil:
		return
	case err != nil:
		h.refuse(ctx, BusWhat, ev.Revision, fmt.Sprintf("%s not applied: could not check its sequence number: %v; %s", what, err, keep))
		return
	}
	// Applied every time it arrives (each reconnect): what a crash between the store and the
	// files left undone is done then; files that already say it are not written.
	changed, err := h.applyBus(d)
	if err != nil {
		h.refuse(ctx, BusWhat, ev.Revision, fmt.Sprintf("%s accepted but not applied: %v; it is applied again when it arrives at the next reconnect", what, err))
		return
	}
	h.mu.Lock()
	h.busSeq = d.Seq
	h.mu.Unlock()
	if !same || len(changed) > 0 {
		h.log.Info("bus configuration applied", "seq", d.Seq, "cas", wire.CAFingerprints(d.Certificates()), "urls", d.URLs,
			"changed", changed, "expires", d.Expires)
	}
	h.heartbeatSoon()
}

// checkBus refuses a configuration this node cannot take: CAs that do not verify the server
// it is connected to now (its next reconnect, to that server or one like it, would fail), or
// URLs that its insecure_plaintext setting refuses.
func (h *Host) checkBus(ctx context.Context, d wire.Bus) error {
	cfg := h.opts.Config
	if certs := d.Certificates(); len(certs) > 0 && cfg.NATSCA != "" {
		pool := x509.NewCertPool()
		for _, c := range certs {
			pool.AddCert(c)
		}
		switch err := h.link.CheckServerCAs(pool); {
		case err == nil, errors.Is(err, link.ErrNotTLS):
		case errors.Is(err, link.ErrNotConnected):
			return fmt.Errorf("the link is down, so its CAs cannot be checked against the server; it is judged again at the next reconnect")
		default:
			// The session's handshake may predate the server's switch to a certificate of the
			// new CA (serve keeps connections made): a fresh handshake says what the next
			// reconnect meets, so the old CA's drop takes while the node stays connected.
			perr := h.link.ProbeServerCAs(ctx, pool)
			if perr == nil {
				h.log.Info("the bus configuration's CAs do not verify this link's session, made before the server's certificate changed, but a new connection to the same server verifies with them: taken", "session", err)
				break
			}
			h.log.Warn("the bus configuration's CAs verify neither this link's session nor a new connection to the same server: refused", "session", err, "probe", perr)
			return fmt.Errorf("%w; %w; applied, this node would lose its link at its next reconnect: switch the servers' certificates only after every node took a bundle holding both CAs (mesh-release bus ca status)", err, perr)
		}
	}
	if d.URLs != nil {
		if err := link.CheckPlaintext(d.URLs, cfg.NATSCA, cfg.InsecurePlaintext); err != nil {
			return err
		}
	}
	return nil
}

// applyBus writes d's CAs to the CA file and its URLs to host.json where they differ from what
// is there, and names what it changed.
func (h *Host) applyBus(d wire.Bus) (changed []string, err error) {
	cfg := h.opts.Config
	if certs := d.Certificates(); len(certs) > 0 {
		if cfg.NATSCA == "" {
			h.log.Warn("the bus configuration names CAs, but this node has no nats_ca: it trusts the system's CAs for the bus, and is left so")
		} else {
			pemBytes := wire.EncodeCAs(certs)
			if old, err := os.ReadFile(cfg.NATSCA); err != nil || !bytes.Equal(old, pemBytes) {
				if err := atomicfile.WriteFile(cfg.NATSCA, pemBytes, 0o644); err != nil {
					return changed, fmt.Errorf("write the CA file %s: %w", cfg.NATSCA, err)
				}
				changed = append(changed, cfg.NATSCA)
			}
		}
	}
	if d.URLs != nil && !slices.Equal(d.URLs, h.busURLs()) {
		if err := config.SetNATSURLs(cfg.File, d.URLs); err != nil {
			return changed, err
		}
		h.mu.Lock()
		h.urls = slices.Clone(d.URLs)
		h.mu.Unlock()
		changed = append(changed, cfg.File)
		h.log.Info("the bus's URLs are written to host.json; this host dials them from its next start (the connection up now keeps its servers)",
			"nats_urls", d.URLs, "config", cfg.File)
	}
	return changed, nil
}

// busURLs are the URLs host.json holds as far as this host knows: those it started with, or
// the last it wrote.
func (h *Host) busURLs() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.urls != nil {
		return h.urls
	}
	return h.opts.Config.NATSURLs
}

// loadBusSeq reads the seq of the bus configuration accepted last, for the heartbeat.
func (h *Host) loadBusSeq(ctx context.Context) error {
	a, ok, err := h.store.Accepted(ctx, BusWhat, wire.BusKey)
	if err != nil || !ok {
		return err
	}
	h.mu.Lock()
	h.busSeq = a.Seq
	h.mu.Unlock()
	return nil
}

// busState is what the heartbeat says of the bus configuration: the seq applied last and the
// fingerprints of the CAs the node's CA file holds now (at most wire.MaxBusCAs; none without
// a CA file).
func (h *Host) busState() (seq uint64, cas []string) {
	h.mu.Lock()
	seq = h.busSeq
	h.mu.Unlock()
	if path := h.opts.Config.NATSCA; path != "" {
		b, err := os.ReadFile(path)
		if err != nil {
			h.log.Debug("heartbeat: could not read the CA file", "file", path, "err", err)
		}
		cas = caFingerprints(b)
	}
	return seq, cas
}

// caFingerprints are the fingerprints of the certificates in a PEM file, at most
// wire.MaxBusCAs; what is not a certificate is skipped (the file may have been made by hand).
func caFingerprints(b []byte) []string {
	var out []string
	for len(out) < wire.MaxBusCAs {
		var block *pem.Block
		block, b = pem.Decode(b)
		if block == nil {
			break
		}
		if block.Type != "CERTIFICATE" {
			continue
		}
		if c, err := x509.ParseCertificate(block.Bytes); err == nil {
			out = append(out, wire.CAFingerprint(c))
		}
	}
	return out
}
