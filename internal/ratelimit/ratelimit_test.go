package ratelimit

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"
)

// fakeClock moves only when a Reader sleeps: the test measures bytes over its time, never the
// machine's.
type fakeClock struct {
	now   time.Time
	slept time.Duration
}

func (c *fakeClock) Now() time.Time { return c.now }
func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.now = c.now.Add(d)
	c.slept += d
	return nil
}

// A limited reader never has returned more than rate × elapsed + Burst bytes at any point, and
// reading everything takes (size − Burst) / rate of the clock's time, within a millisecond a
// step; every byte arrives, in order.
func TestAReaderNeverReadsFasterThanItsRate(t *testing.T) {
	for _, tc := range []struct {
		name string
		rate int64
		size int
		buf  int
	}{
		{"50 KB/s, 1 MB in 32 KiB reads", 50_000, 1_000_000, 32 << 10},
		{"200 KiB/s, 5 MB in 128 KiB reads (a chunk)", 200 << 10, 5_000_000, 128 << 10},
		{"the smallest bucket: 2 KB/s, 20 KB in 1-byte reads", 2_000, 20_000, 1},
		{"a fast link: 10 MB/s, 3 MB", 10_000_000, 3_000_000, 256 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := bytes.Repeat([]byte("0123456789abcdef"), tc.size/16+1)[:tc.size]
			c := &fakeClock{now: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)}
			start := c.now
			r := Reader(context.Background(), bytes.NewReader(src), tc.rate, c)
			var got bytes.Buffer
			p := make([]byte, tc.buf)
			burst := float64(Burst(tc.rate))
			for {
				n, err := r.Read(p)
				got.Write(p[:n])
				elapsed := c.now.Sub(start).Seconds()
				if float64(got.Len()) > float64(tc.rate)*elapsed+burst+0.5 {
					t.Fatalf("%d bytes after %.3fs: more than %d/s × elapsed + a burst of %.0f", got.Len(), elapsed, tc.rate, burst)
				}
				if err == io.EOF {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			if !bytes.Equal(got.Bytes(), src) {
				t.Fatal("the bytes read are not the source's")
			}
			want := time.Duration((float64(tc.size) - burst) / float64(tc.rate) * float64(time.Second))
			if took := c.now.Sub(start); took < want || took > want+want/50+time.Second {
				t.Errorf("%d bytes took %s of the clock, want about %s", tc.size, took, want)
			}
		})
	}
}

// No rate is no limit: the reader is returned as it is. A cancelled context ends a wait.
func TestNoRateIsNoLimitAndACancelEndsAWait(t *testing.T) {
	src := bytes.NewReader([]byte("x"))
	if r := Reader(context.Background(), src, 0, nil); r != io.Reader(src) {
		t.Error("rate 0 wrapped the reader")
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &fakeClock{now: time.Now()}
	r := Reader(ctx, bytes.NewReader(make([]byte, 10_000)), 1_000, c)
	if _, err := io.ReadFull(r, make([]byte, Burst(1_000))); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := r.Read(make([]byte, 10)); err != context.Canceled {
		t.Fatalf("read after cancel: %v, want context.Canceled", err)
	}
}

// A limited writer passes every byte on, in order, never more than rate × elapsed + Burst.
func TestAWriterNeverWritesFasterThanItsRate(t *testing.T) {
	const rate, size = 100_000, 2_000_000
	c := &fakeClock{now: time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)}
	start := c.now
	var dst checkingWriter
	dst.check = func(total int) {
		if elapsed := c.now.Sub(start).Seconds(); float64(total) > rate*elapsed+float64(Burst(rate))+0.5 {
			t.Fatalf("%d bytes after %.3fs: faster than %d/s", total, elapsed, rate)
		}
	}
	src := bytes.Repeat([]byte("abcdefgh"), size/8)
	w := Writer(context.Background(), &dst, rate, c)
	if n, err := w.Write(src[:size/2]); err != nil || n != size/2 {
		t.Fatalf("wrote %d, %v", n, err)
	}
	if _, err := io.Copy(w, bytes.NewReader(src[size/2:])); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.b.Bytes(), src) {
		t.Fatal("the bytes written are not the source's")
	}
	want := time.Duration(float64(size-Burst(rate)) / rate * float64(time.Second))
	if took := c.now.Sub(start); took < want || took > want+time.Second {
		t.Errorf("took %s of the clock, want about %s", took, want)
	}
}

type checkingWriter struct {
	b     bytes.Buffer
	check func(total int)
}

func (w *checkingWriter) Write(p []byte) (int, error) {
	n, err := w.b.Write(p)
	w.check(w.b.Len())
	return n, err
}
