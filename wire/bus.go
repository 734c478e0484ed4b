package wire

import (
	"bytes"
	"crypto/ed25519"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	txt "github.com/novox/mesh-host/internal/text"
)

// The bus configuration (decision 0046): the CAs a node trusts for the bus's TLS and the bus's
// URLs, signed under the targets role and followed by every node over its link, so that a CA
// rollover and a change of servers reach every node without anyone touching one.

// BusKey is the releases bucket's key holding the bus configuration (nodes may direct-get any
// key of that bucket and are notified of this one).
const BusKey = "bus"

// BusSigningHeader is the first line of the text a bus configuration's signatures cover.
const BusSigningHeader = "mesh-host bus 1\n"

// Limits of a bus configuration (MaxBusCAs, in heartbeat.go, bounds its CAs).
const (
	MaxBusURLs     = 32
	MaxBusURLBytes = 512
	// MaxBusCABytes bounds one CA certificate's DER.
	MaxBusCABytes = 8 << 10
)

// Bus is the value under the releases bucket's key BusKey. Its signatures cover SigningText:
//
//	mesh-host bus 1
//	seq=1764417600000
//	expires=2027-12-02T12:00:00Z
//	ca=sha256:<hex of the SHA-256 of the first CA certificate's DER>
//	ca=sha256:<hex …>
//	url=tls://bus-1.example.net:4222
//	url=tls://bus-2.example.net:4222
//
// each line ending in "\n", the ca= lines in the order of CAs, the url= lines in the order of
// URLs; a configuration without CAs (or URLs) has no such lines, and changes none on a node. The fingerprints cover the certificates, so a node writes the certificates it parsed
// (CAPEM), never other bytes the PEM text carried. A node keeps the highest Seq it accepted and
// refuses a lower one (a replay); it does not apply a configuration past Expires, and never
// undoes one it applied because it expired.
type Bus struct {
	Seq uint64 `json:"seq"`
	// CAs is a PEM bundle of the CA certificates a node trusts for the bus's TLS: 1 to
	// MaxBusCAs CERTIFICATE blocks, nothing else; empty leaves a node's CA file as it is.
	CAs string `json:"cas,omitempty"`
	// URLs are the bus's servers, as host.json nats_urls holds them: nats, tls, ws or wss, each
	// with a host and no user or password; absent leaves a node's nats_urls as they are.
	URLs    []string `json:"urls,omitempty"`
	Expires string   `json:"expires"`
	SignatureList
}

// ParseBus decodes a bus configuration strictly (DecodeSigned) and validates it. It does not
// check the signatures: that is Trust.Verify of its Envelope.
func ParseBus(b []byte) (Bus, error) { return parseSigned[Bus](KindBus, b) }

// Validate checks every field, naming the first that is wrong; the signatures are checked for
// form.
func (d Bus) Validate() error {
	if err := checkSeq("bus", d.Seq); err != nil {
		return err
	}
	if _, err := time.Parse(time.RFC3339, d.Expires); err != nil {
		return fmt.Errorf("bus: expires %q is not an RFC 3339 time like 2027-12-02T12:00:00Z", txt.Bound(d.Expires))
	}
	if d.CAs == "" && d.URLs == nil {
		return fmt.Errorf("bus: neither cas nor urls: a bus configuration changes at least one")
	}
	if d.CAs != "" {
		if _, err := ParseBusCAs(d.CAs); err != nil {
			return fmt.Errorf("bus: cas: %w", err)
		}
	}
	if d.URLs != nil {
		if err := CheckBusURLs(d.URLs); err != nil {
			return fmt.Errorf("bus: urls: %w", err)
		}
	}
	return d.SignatureList.Check("bus")
}

// ParseBusCAs reads a PEM bundle of CA certificates: 1 to MaxBusCAs CERTIFICATE blocks, each a
// CA certificate (basic constraints, CA true) of at most MaxBusCABytes, none twice, and nothing
// but white space outside them.
func ParseBusCAs(bundle string) ([]*x509.Certificate, error) {
	rest := []byte(bundle)
	var certs []*x509.Certificate
	for {
		rest = bytes.TrimSpace(rest)
		if len(rest) == 0 {
			break
		}
		block, next := pem.Decode(rest)
		if block == nil {
			return nil, fmt.Errorf("certificate %d: not a PEM block: a bundle holds CERTIFICATE blocks and nothing else", len(certs)+1)
		}
		rest = next
		n := len(certs) + 1
		if block.Type != "CERTIFICATE" || len(block.Headers) > 0 {
			return nil, fmt.Errorf("certificate %d: a %s block; a bundle holds CERTIFICATE blocks without headers", n, txt.Bound(block.Type))
		}
		if len(certs) == MaxBusCAs {
			return nil, fmt.Errorf("more than %d certificates", MaxBusCAs)
		}
		if len(block.Bytes) > MaxBusCABytes {
			return nil, fmt.Errorf("certificate %d: %d bytes, more than the %d allowed", n, len(block.Bytes), MaxBusCABytes)
		}
		c, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			return nil, fmt.Errorf("certificate %d: %w", n, err)
		}
		if !c.BasicConstraintsValid || !c.IsCA {
			return nil, fmt.Errorf("certificate %d (%s): not a CA certificate; a bundle holds the CAs that sign the servers' certificates", n, txt.Bound(c.Subject.CommonName))
		}
		for i, prev := range certs {
			if prev.Equal(c) {
				return nil, fmt.Errorf("certificate %d is certificate %d again", n, i+1)
			}
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, fmt.Errorf("no certificate; a bundle holds 1 to %d CA certificates", MaxBusCAs)
	}
	return certs, nil
}

// CAFingerprint names a certificate as a heartbeat's bus_cas and a bus configuration's signing
// text do: "sha256:" and the hex of the SHA-256 of its DER.
func CAFingerprint(c *x509.Certificate) string {
	sum := sha256.Sum256(c.Raw)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CAFingerprints are the fingerprints of certs, in order.
func CAFingerprints(certs []*x509.Certificate) []string {
	out := make([]string, len(certs))
	for i, c := range certs {
		out[i] = CAFingerprint(c)
	}
	return out
}

// EncodeCAs is certs as a PEM bundle, the form a node writes to its CA file.
func EncodeCAs(certs []*x509.Certificate) []byte {
	var b bytes.Buffer
	for _, c := range certs {
		pem.Encode(&b, &pem.Block{Type: "CERTIFICATE", Bytes: c.Raw})
	}
	return b.Bytes()
}

// CheckBusURLs accepts 1 to MaxBusURLs URLs a node can dial: nats, tls, ws or wss, each with a
// host, no user or password (the document is read by every node), none twice. Whether a
// plaintext URL is allowed is the node's setting (host.json insecure_plaintext).
func CheckBusURLs(urls []string) error {
	if len(urls) == 0 || len(urls) > MaxBusURLs {
		return fmt.Errorf("%d URLs; give 1 to %d", len(urls), MaxBusURLs)
	}
	for i, s := range urls {
		if len(s) > MaxBusURLBytes {
			return fmt.Errorf("URL %d: %d bytes, more than %d", i+1, len(s), MaxBusURLBytes)
		}
		u, err := url.Parse(s)
		if err != nil {
			return fmt.Errorf("URL %d: %q is not a URL", i+1, txt.Bound(s))
		}
		switch u.Scheme {
		case "nats", "tls", "ws", "wss":
		default:
			return fmt.Errorf("URL %d: %q: scheme %q is not nats, tls, ws or wss", i+1, txt.Bound(s), txt.Bound(u.Scheme))
		}
		if u.Hostname() == "" {
			return fmt.Errorf("URL %d: %q has no host", i+1, txt.Bound(s))
		}
		if u.User != nil {
			return fmt.Errorf("URL %d: %q carries a user or password; every node reads this document, and a node's credentials are its own", i+1, txt.Bound(u.Redacted()))
		}
		if strings.ContainsAny(s, ", \t\r\n") {
			return fmt.Errorf("URL %d: %q holds a comma or white space", i+1, txt.Bound(s))
		}
		for j, prev := range urls[:i] {
			if prev == s {
				return fmt.Errorf("URL %d is URL %d again", i+1, j+1)
			}
		}
	}
	return nil
}

// Certificates are the CA certificates of a validated configuration (nil if CAs does not parse).
func (d Bus) Certificates() []*x509.Certificate {
	certs, _ := ParseBusCAs(d.CAs)
	return certs
}

// ExpiresAt is Expires as a time; the zero time if it does not parse (Validate refuses that).
func (d Bus) ExpiresAt() time.Time {
	at, _ := time.Parse(time.RFC3339, d.Expires)
	return at
}

// SigningText returns the exact bytes the signatures cover.
func (d Bus) SigningText() []byte {
	var b bytes.Buffer
	b.WriteString(BusSigningHeader)
	fmt.Fprintf(&b, "seq=%d\nexpires=%s\n", d.Seq, d.Expires)
	for _, fp := range CAFingerprints(d.Certificates()) {
		fmt.Fprintf(&b, "ca=%s\n", fp)
	}
	for _, u := range d.URLs {
		fmt.Fprintf(&b, "url=%s\n", u)
	}
	return b.Bytes()
}

// Envelope is the configuration as the verifier sees it: signed by the targets role.
func (d Bus) Envelope() Envelope {
	return Envelope{Kind: KindBus, Name: "seq " + strconv.FormatUint(d.Seq, 10), Role: RoleTargets,
		Text: d.SigningText(), Signatures: d.List(), Expires: d.ExpiresAt()}
}

// NewBus is a bus configuration of cas and urls (either may be empty, not both) numbered after prev (the seq the key holds now,
// or zero) and valid for ttl from now, unsigned (Sign adds signatures). Its seq is the larger of
// prev + 1 and now in Unix milliseconds, as a target's.
func NewBus(cas []*x509.Certificate, urls []string, prev uint64, now time.Time, ttl time.Duration) (Bus, error) {
	if prev >= MaxSeq {
		return Bus{}, fmt.Errorf("bus: the value it replaces has seq %d, the largest allowed: no later one can be numbered", prev)
	}
	d := Bus{Seq: max(prev+1, uint64(max(now.UnixMilli(), 0))), CAs: string(EncodeCAs(cas)), URLs: urls,
		Expires: now.Add(ttl).UTC().Truncate(time.Second).Format(time.RFC3339)}
	if err := d.Validate(); err != nil {
		return Bus{}, err
	}
	return d, nil
}

// Sign validates the configuration and adds priv's signature (SignatureList.Add).
func (d *Bus) Sign(priv ed25519.PrivateKey) error {
	if err := d.Validate(); err != nil {
		return fmt.Errorf("sign bus: %w", err)
	}
	if err := d.SignatureList.Add(d.SigningText(), priv); err != nil {
		return fmt.Errorf("sign bus seq %d: %w", d.Seq, err)
	}
	return nil
}

// Marshal returns the configuration's JSON.
func (d Bus) Marshal() []byte { b, _ := json.Marshal(d); return b }
