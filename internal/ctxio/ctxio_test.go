package ctxio

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestReaderStopsOnceItsContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	r := Reader(ctx, strings.NewReader("abcdef"))
	p := make([]byte, 3)
	if n, err := r.Read(p); n != 3 || err != nil || string(p) != "abc" {
		t.Fatalf("before cancel: %d %q %v, want 3 \"abc\" nil", n, p[:n], err)
	}
	cancel()
	if n, err := r.Read(p); n != 0 || !errors.Is(err, context.Canceled) {
		t.Fatalf("after cancel: %d %v, want 0 and context.Canceled", n, err)
	}
	if _, err := io.ReadAll(Reader(context.Background(), strings.NewReader("x"))); err != nil {
		t.Fatalf("a live context: %v", err)
	}
}
