package main

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/targets"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// The withdrawal list expires once the bus holds a root (7 days by default, --list-ttl to
// choose, 0 for never) and never before, where hosts from before roots refuse a list carrying an
// expiry; --key repeated signs it with each key; --renew signs the list on the bus again with
// the same withdrawals and a higher seq, taking the old key's list with --trust.
func TestWithdrawSignsAListThatExpiresOnceTheBusHoldsARoot(t *testing.T) {
	for _, tc := range []struct {
		name    string
		roots   int
		args    []string
		expires time.Duration // 0: none
		keys    int
	}{
		{"no root: a list that never expires, as before", 0, nil, 0, 1},
		{"a root: 7 days", 1, nil, 7 * 24 * time.Hour, 1},
		{"a root and --list-ttl 48h", 1, []string{"--list-ttl", "48h"}, 48 * time.Hour, 1},
		{"a root and --list-ttl 0: never", 1, []string{"--list-ttl", "0"}, 0, 1},
		{"two keys: two signatures", 1, []string{"--key", keyFileOf(t, meshtest.SecondKey)}, 7 * 24 * time.Hour, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, c := startServeConnected(t)
			ctx := context.Background()
			names := wire.NamesFor("")
			announce(t, c, "v1.2.0")
			kv, err := c.JS.KeyValue(ctx, names.Releases())
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range meshtest.RootChain(t, tc.roots, time.Now().Add(24*time.Hour)) {
				if _, err := kv.Put(ctx, wire.RootKey(r.Version), r.Marshal()); err != nil {
					t.Fatal(err)
				}
			}
			env := map[string]string{envNATSURL: url}
			args := append([]string{"withdraw", "v1.2.0", "--key", keyFile(t), "--reason", "leaks fds"}, tc.args...)
			code, out, errOut := runMain(t, env, args...)
			if code != 0 {
				t.Fatalf("withdraw: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			list, _, err := targets.ReadWithdrawals(ctx, c.JS, names)
			if err != nil {
				t.Fatal(err)
			}
			checkList(t, list, tc.expires, tc.keys)
			if tc.expires > 0 && !strings.Contains(out, ", valid until "+list.Expires+")") {
				t.Errorf("withdraw does not say until when the list is valid: %q", out)
			}

			// --renew with another key, the list's key given with --trust.
			code, out, errOut = runMain(t, env, "withdraw", "--renew", "--key", keyFileOf(t, meshtest.StrangerKey), "--trust", pubFileOf(t, meshtest.ReleaseKey))
			if code != 0 || !regexp.MustCompile(`^signed the withdrawal list again: seq \d+, 1 version withdrawn, signed by key `+wire.KeyID(meshtest.StrangerKey.Public)).MatchString(out) {
				t.Fatalf("withdraw --renew: exit %d, stdout %q, stderr %q", code, out, errOut)
			}
			again, _, err := targets.ReadWithdrawals(ctx, c.JS, names)
			if err != nil {
				t.Fatal(err)
			}
			if again.Seq <= list.Seq || !slices.Equal(again.Withdrawn, list.Withdrawn) || again.KeyID != wire.KeyID(meshtest.StrangerKey.Public) {
				t.Errorf("renewed: seq %d (was %d), %+v, key %s", again.Seq, list.Seq, again.Withdrawn, again.KeyID)
			}
		})
	}
}

// checkList checks a list's expiry (0: none) and how many keys signed it.
func checkList(t *testing.T, list wire.Withdrawals, expires time.Duration, keys int) {
	t.Helper()
	if expires == 0 {
		if list.Expires != "" {
			t.Errorf("the list expires %s; want none", list.Expires)
		}
	} else if left := time.Until(list.ExpiresAt()); left > expires || left < expires-time.Minute {
		t.Errorf("the list is valid %s; want %s", left, expires)
	}
	if n := len(list.List()); n != keys || (keys == 1) != (list.KeyID != "") {
		t.Errorf("%d signatures (key_id %q); want %d", n, list.KeyID, keys)
	}
}

// pubFileOf writes k's public key as release.pub is written and returns its path.
func pubFileOf(t *testing.T, k meshtest.KeyPair) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "key.pub")
	if err := os.WriteFile(p, []byte(base64.StdEncoding.EncodeToString(k.Public)+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
