// Package config reads the host's settings: ROOT/host.json (or --config), then MESH_HOST_*
// environment variables, which win. Defaults are filled in one place, Config.withDefaults.
package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/novox/mesh-host/internal/atomicfile"
	"github.com/novox/mesh-host/internal/text"
	"github.com/novox/mesh-host/rollback"
	"github.com/novox/mesh-host/wire"
)

// Config is every host setting. The JSON names are the host.json fields; each has a
// MESH_HOST_* variable named in envNames.
type Config struct {
	Root string `json:"-"`
	// File is the host.json this configuration was read from, or would be (ROOT/host.json
	// when none exists): where a bus configuration's URLs are written (SetNATSURLs).
	File string `json:"-"`
	Node string `json:"node,omitempty"`
	// NodeFrom says where Node came from, for a refusal that depends on it: "the node id of
	// host.json at P", "the node id MESH_HOST_NODE sets", or the short hostname and why.
	NodeFrom    string   `json:"-"`
	NATSURLs    []string `json:"nats_urls,omitempty"`
	NATSCreds   string   `json:"nats_creds,omitempty"`
	NATSCA      string   `json:"nats_ca,omitempty"`
	Prefix      string   `json:"prefix,omitempty"`
	TrustedKeys []string `json:"trusted_keys,omitempty"`
	// TrustedTargetKeys verify the targets and the withdrawal list (decision 0011); empty
	// means TrustedKeys, so the release key may also choose versions. TargetKeys says which.
	TrustedTargetKeys []string `json:"trusted_target_keys,omitempty"`
	// InsecurePlaintext lets the link use a nats:// or ws:// URL to a machine that is not this
	// one; without it such a URL is refused, since the node's credentials, declarations and
	// heartbeats would cross the network unencrypted.
	InsecurePlaintext bool `json:"insecure_plaintext,omitempty"`
	// JSAPIPrefix is the JetStream API prefix the link uses: wire.NodeJSAPIPrefix for a node
	// user in its own account (what `mesh-host enrol` writes), empty for the plain $JS.API of a
	// bus without accounts (serve --insecure-no-auth, a single-account NATS).
	JSAPIPrefix       string   `json:"js_api_prefix,omitempty"`
	ReconcileInterval Duration `json:"reconcile_interval,omitempty"`
	HeartbeatInterval Duration `json:"heartbeat_interval,omitempty"`
	// MaxDeclarationBytes is the largest declaration the host accepts; a larger one is refused
	// and the held one kept. Default wire.DefaultMaxDeclarationBytes (1 MiB).
	MaxDeclarationBytes int64 `json:"max_declaration_bytes,omitempty"`
	// MaxFetchRate caps, in bytes per second, how fast the host fetches a host version, so an
	// upgrade does not take the link the machine is there to serve; 0 is no cap. At least
	// MinFetchRate.
	MaxFetchRate int64 `json:"max_fetch_rate,omitempty"`
	// LinkClass says what the node's link costs: "" or LinkUnmetered, or LinkMetered (a rollout
	// defers metered nodes to its last batch). Carried in the heartbeat.
	LinkClass string `json:"link_class,omitempty"`
}

// The link classes host.json's link_class takes (wire.LinkMetered is the one a rollout reads).
const (
	LinkUnmetered = "unmetered"
	LinkMetered   = wire.LinkMetered
)

// MinFetchRate is the smallest max_fetch_rate: slower, a 10 MB archive takes more than three
// hours.
const MinFetchRate = 1 << 10

// Duration is a time.Duration written as "10m" in host.json.
type Duration time.Duration

// UnmarshalJSON accepts a Go duration string ("30s", "10m").
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string like \"30s\": %w", err)
	}
	v, err := parseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as a Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Std returns the duration as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func parseDuration(s string) (time.Duration, error) {
	v, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a duration like \"30s\" or \"10m\"", s)
	}
	if v <= 0 {
		return 0, fmt.Errorf("duration %q must be positive", s)
	}
	return v, nil
}

// Env is the environment the settings are read from; os.Getenv in production, a map in tests.
type Env func(string) string

// Load reads host.json at path (ROOT/host.json when path is empty; a missing default file is
// fine, a missing named file is not), applies the environment, and fills in defaults.
func Load(root, path string, getenv Env) (Config, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	if v := getenv(rollback.EnvRoot); v != "" && root == "" {
		root = v
	}
	if root == "" {
		root = rollback.DefaultRoot
	}
	c := Config{Root: root}
	file, named := path, path != ""
	if !named {
		file = filepath.Join(root, "host.json")
	}
	c.File = file
	b, err := os.ReadFile(file)
	found := err == nil
	switch {
	case err == nil:
		// The bus's decoder: keys are case-sensitive, duplicates and unknown keys refused.
		if err := wire.DecodeStrict(b, &c); err != nil {
			return Config{}, fmt.Errorf("config %s: %w", file, err)
		}
	case errors.Is(err, fs.ErrNotExist) && !named:
	default:
		return Config{}, fmt.Errorf("config: %w", err)
	}
	if c.Node != "" {
		c.NodeFrom = "the node id of host.json at " + file
	}
	if err := c.applyEnv(getenv); err != nil {
		return Config{}, err
	}
	if getenv("MESH_HOST_NODE") != "" {
		c.NodeFrom = "the node id MESH_HOST_NODE sets"
	}
	if c.Node == "" {
		h, err := os.Hostname()
		if err != nil {
			return Config{}, fmt.Errorf("config: no node id given and the hostname is unreadable: %w", err)
		}
		// The short name: node ids appear in subjects and keys, where dots are separators.
		c.Node, _, _ = strings.Cut(h, ".")
		why := "there is no host.json at " + file
		if found {
			why = "host.json at " + file + " names no node"
		}
		c.NodeFrom = fmt.Sprintf("the short hostname, as %s; set \"node\" there or MESH_HOST_NODE", why)
	}
	if c.MaxDeclarationBytes < 0 {
		return Config{}, fmt.Errorf("config: max_declaration_bytes is %d; it must be a positive number of bytes (default %d)", c.MaxDeclarationBytes, wire.DefaultMaxDeclarationBytes)
	}
	c = c.withDefaults()
	if err := c.checkLink(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// The defaults of the settings host.json and the environment leave out.
const (
	DefaultReconcileInterval = 10 * time.Minute
	DefaultHeartbeatInterval = 30 * time.Second
)

// withDefaults returns c with every setting left out at its default (decision 0041).
func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = wire.DefaultPrefix
	}
	if c.ReconcileInterval == 0 {
		c.ReconcileInterval = Duration(DefaultReconcileInterval)
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = Duration(DefaultHeartbeatInterval)
	}
	if c.MaxDeclarationBytes == 0 {
		c.MaxDeclarationBytes = wire.DefaultMaxDeclarationBytes
	}
	return c
}

func (c *Config) applyEnv(getenv Env) error {
	str := map[string]*string{
		"MESH_HOST_NODE":          &c.Node,
		"MESH_HOST_NATS_CREDS":    &c.NATSCreds,
		"MESH_HOST_NATS_CA":       &c.NATSCA,
		"MESH_HOST_PREFIX":        &c.Prefix,
		"MESH_HOST_JS_API_PREFIX": &c.JSAPIPrefix,
		"MESH_HOST_LINK_CLASS":    &c.LinkClass,
	}
	for name, p := range str {
		if v := getenv(name); v != "" {
			*p = v
		}
	}
	list := map[string]*[]string{
		"MESH_HOST_NATS_URL":     &c.NATSURLs,
		"MESH_HOST_TRUSTED_KEYS": &c.TrustedKeys,
		// Set to an empty list it cannot be: unset means host.json's, or trusted_keys.
		"MESH_HOST_TRUSTED_TARGET_KEYS": &c.TrustedTargetKeys,
	}
	for name, p := range list {
		if v := getenv(name); v != "" {
			*p = splitList(v)
		}
	}
	dur := map[string]*Duration{
		"MESH_HOST_RECONCILE_INTERVAL": &c.ReconcileInterval,
		"MESH_HOST_HEARTBEAT_INTERVAL": &c.HeartbeatInterval,
	}
	if v := getenv("MESH_HOST_INSECURE_PLAINTEXT"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("config MESH_HOST_INSECURE_PLAINTEXT: %q is not 1, true, 0 or false", v)
		}
		c.InsecurePlaintext = b
	}
	if v := getenv("MESH_HOST_MAX_DECLARATION_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return fmt.Errorf("config MESH_HOST_MAX_DECLARATION_BYTES: %q is not a positive number of bytes (like 1048576)", v)
		}
		c.MaxDeclarationBytes = n
	}
	if v := getenv("MESH_HOST_MAX_FETCH_RATE"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return fmt.Errorf("config MESH_HOST_MAX_FETCH_RATE: %q is not a number of bytes per second (like 200000; 0 for no cap)", v)
		}
		c.MaxFetchRate = n
	}
	for name, p := range dur {
		if v := getenv(name); v != "" {
			d, err := parseDuration(v)
			if err != nil {
				return fmt.Errorf("config %s: %w", name, err)
			}
			*p = Duration(d)
		}
	}
	return nil
}

// checkLink checks max_fetch_rate and link_class, naming what is wrong.
func (c Config) checkLink() error {
	if c.MaxFetchRate != 0 && (c.MaxFetchRate < MinFetchRate || c.MaxFetchRate > 1<<40) {
		return fmt.Errorf("config: max_fetch_rate is %d bytes per second; give at least %d (1 KiB/s), or 0 for no cap", c.MaxFetchRate, MinFetchRate)
	}
	switch c.LinkClass {
	case "", LinkUnmetered, LinkMetered:
		return nil
	}
	return fmt.Errorf("config: link_class %q is not %q or %q", text.Bound(c.LinkClass), LinkUnmetered, LinkMetered)
}

// TargetKeys are the keys that verify targets and withdrawal lists, in the form trusted_keys
// takes (wire.ParseTrustedKeys reads them): trusted_target_keys when set, else trusted_keys.
func (c Config) TargetKeys() []string {
	if len(c.TrustedTargetKeys) > 0 {
		return c.TrustedTargetKeys
	}
	return c.TrustedKeys
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// SetNATSURLs writes urls as nats_urls into the host.json at path (made, 0600, when there is
// none) and keeps every other field's value as it was: temp file, fsync, rename. The keys are
// written sorted, as `mesh-host enrol` writes them. A bus configuration the host accepted uses
// it (decision 0046).
func SetNATSURLs(path string, urls []string) error {
	m := map[string]json.RawMessage{}
	mode := os.FileMode(0o600)
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := wire.DecodeStrict(b, &m); err != nil || m == nil {
			return fmt.Errorf("config %s: not a JSON object, so its nats_urls are not rewritten: %v", path, err)
		}
		if st, err := os.Stat(path); err == nil {
			mode = st.Mode().Perm()
		}
	case !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("config: %w", err)
	}
	v, err := json.Marshal(urls)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	m["nats_urls"] = v
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	if err := atomicfile.WriteFile(path, append(out, '\n'), mode); err != nil {
		return fmt.Errorf("config: write %s: %w", path, err)
	}
	return nil
}
