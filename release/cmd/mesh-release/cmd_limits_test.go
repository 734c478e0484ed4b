package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/novox/mesh-host/wire/meshtest"
)

// bigDeclaration is a valid declaration for node of at least size bytes.
func bigDeclaration(node string, size int) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, `{"version":1,"node":%q,"resources":[`, node)
	for i := 0; b.Len() < size; i++ {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"type":"file","id":"/srv/app/data/file-%06d.conf","spec":{"content":""}}`, i)
	}
	b.WriteString("]}")
	return []byte(b.String())
}

// The issue: `declare` put whatever fit the server. On a server that takes 8 MiB messages, a
// valid 1.5 MB declaration is refused by its size before anything is sent.
func TestDeclareRefusesADeclarationOverTheLimitByName(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	b := meshtest.StartBus(t, meshtest.MaxPayload(8<<20))
	big := bigDeclaration("n1", 1_500_000)
	err := execCmd(ctx, "declare", bytes.NewReader(big), &bytes.Buffer{}, "--nats", b.URL(), "n1", "-")
	want := fmt.Sprintf("declaration is %s bytes, over the 1,048,576-byte limit", commas(len(big)))
	if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "--max-bytes") || !strings.Contains(err.Error(), "nothing was put") {
		t.Fatalf("err = %v, want it to say %q and name --max-bytes", err, want)
	}
	if _, err := b.KV(b.Names.Declarations()).Get(ctx, "n1"); err == nil {
		t.Fatal("the refused declaration was put")
	}

	small := bigDeclaration("n1", 2000)
	for _, tc := range []struct {
		max string
		ok  bool
	}{{"1000", false}, {fmt.Sprint(len(small)), true}} {
		err := execCmd(ctx, "declare", bytes.NewReader(small), &bytes.Buffer{}, "--nats", b.URL(), "--force", "--max-bytes", tc.max, "n1", "-")
		if (err == nil) != tc.ok {
			t.Errorf("--max-bytes %s with %d bytes: %v, want ok=%v", tc.max, len(small), err, tc.ok)
		}
	}
}

func commas(n int) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
