package targets

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/novox/mesh-host/release/bus"
	"github.com/novox/mesh-host/wire"
	"github.com/novox/mesh-host/wire/meshtest"
)

// Withdrawals made at the same moment from separate connections all land: each that loses the
// compare-and-set adds its entry to the list that won, and the list verifies with the key.
func TestConcurrentWithdrawalsAllLandInTheList(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, 60*time.Second)
	const n = 8
	var wg sync.WaitGroup
	errs := make(chan error, n)
	start := make(chan struct{})
	for i := range n {
		c, err := bus.Connect(ctx, b.URL(), "")
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := Withdraw(ctx, c.JS, b.Names, fmt.Sprintf("v1.%d.0", i), fmt.Sprintf("reason %d", i), meshtest.ReleaseKey.Private, nil)
			errs <- err
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	list, _, err := ReadWithdrawals(ctx, b.Conn.JS, b.Names)
	if err != nil {
		t.Fatal(err)
	}
	if err := list.Verify(wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()); err != nil {
		t.Errorf("the list does not verify: %v", err)
	}
	var got []string
	for _, e := range list.Withdrawn {
		got = append(got, e.Version)
	}
	slices.Sort(got)
	if len(got) != n || got[0] != "v1.0.0" || got[n-1] != fmt.Sprintf("v1.%d.0", n-1) {
		t.Errorf("withdrawn %v; want all %d", got, n)
	}
}

// A version withdrawn again is not added twice: the entry already there is returned and nothing
// is written.
func TestWithdrawingAVersionAgainWritesNothing(t *testing.T) {
	b := meshtest.StartBus(t)
	ctx := meshtest.Context(t, 20*time.Second)
	first, err := Withdraw(ctx, b.Conn.JS, b.Names, "v1.2.0", "crashes on arm64", meshtest.ReleaseKey.Private, nil)
	if err != nil || first.Already {
		t.Fatalf("first: %+v, %v", first, err)
	}
	again, err := Withdraw(ctx, b.Conn.JS, b.Names, "v1.2.0", "another reason", meshtest.ReleaseKey.Private, nil)
	if err != nil || !again.Already || again.Rev != first.Rev || again.Entry.Reason != "crashes on arm64" {
		t.Errorf("again: %+v, %v; want the first entry, nothing written", again, err)
	}
}

// The list on the bus is added to only when it verifies with the withdrawing key or a key given
// to trust: re-signing it vouches for every entry it holds.
func TestWithdrawAddsOnlyToAListItCanVerify(t *testing.T) {
	other, err := wire.Withdrawals{}.Withdraw("v1.0.0", "by the other key", time.Now(), meshtest.SecondKey.Private)
	if err != nil {
		t.Fatal(err)
	}
	unsigned := other
	unsigned.KeyID, unsigned.Signature = "", ""
	for _, tc := range []struct {
		name    string
		list    wire.Withdrawals
		trusted []meshtest.KeyPair
		want    error
	}{
		{"a list of another key, not trusted", other, nil, ErrUntrustedList},
		{"a list of another key, trusted", other, []meshtest.KeyPair{meshtest.SecondKey}, nil},
		{"an unsigned list", unsigned, []meshtest.KeyPair{meshtest.SecondKey}, ErrUntrustedList},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := meshtest.StartBus(t)
			ctx := meshtest.Context(t, 20*time.Second)
			b.Put(b.Names.Withdrawals(), wire.WithdrawalsKey, tc.list.Marshal())
			res, err := Withdraw(ctx, b.Conn.JS, b.Names, "v1.1.0", "", meshtest.ReleaseKey.Private, trusted(tc.trusted...))
			if !errors.Is(err, tc.want) {
				t.Fatalf("Withdraw: %v; want %v", err, tc.want)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "--trust") {
					t.Errorf("the refusal does not say how to go on: %v", err)
				}
				return
			}
			if len(res.List.Withdrawn) != 2 || res.List.Verify(wire.LegacyTrust(nil, trusted(meshtest.ReleaseKey)), time.Now()) != nil {
				t.Errorf("list %+v: want both entries, signed with the release key", res.List)
			}
		})
	}
}

// Without the bucket (a bus set up before withdrawals) reading and withdrawing say to run init.
func TestWithdrawalsWithoutTheirBucketSayToRunInit(t *testing.T) {
	b := meshtest.StartBus(t, meshtest.NoBuckets())
	ctx := meshtest.Context(t, 20*time.Second)
	if _, _, err := ReadWithdrawals(ctx, b.Conn.JS, b.Names); err == nil || !strings.Contains(err.Error(), "`mesh-release init`") {
		t.Errorf("read: %v", err)
	}
	if _, err := Withdraw(ctx, b.Conn.JS, b.Names, "v1.0.0", "", meshtest.ReleaseKey.Private, nil); err == nil || !strings.Contains(err.Error(), "`mesh-release init`") {
		t.Errorf("withdraw: %v", err)
	}
}
