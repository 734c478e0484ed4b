package bus

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
)

// The issue: two servers shared one data directory without complaint. The second fails at once,
// naming the process that holds it; once the first stops, the directory is free again. (At
// once: ErrDataInUse comes only from the lock taken without waiting, before any server starts.)
func TestServeLocksItsDataDirectory(t *testing.T) {
	dir := t.TempDir()
	s := serveForTest(t, dir, "127.0.0.1:-1")
	_, err := Serve(t.Context(), ServeOptions{DataDir: dir, Listen: "127.0.0.1:-1"})
	if !errors.Is(err, ErrDataInUse) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", os.Getpid())) || !strings.Contains(err.Error(), "--data") {
		t.Fatalf("second serve on %s: %v; want ErrDataInUse naming pid %d and --data", dir, err, os.Getpid())
	}
	s.Shutdown()
	serveForTest(t, dir, "127.0.0.1:-1").Shutdown()
}

// The issue: with the port in use, serve waited 10 s after its banner, for its ready timeout.
// It fails at once, naming the address, and leaves the data directory unlocked. (At once:
// ErrListen comes only from binding the address before the server starts; the server that
// never becomes ready fails with another error, after ReadyTimeout.)
func TestServeFailsAtOnceWhenTheAddressIsInUse(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	_, err = Serve(t.Context(), ServeOptions{DataDir: dir, Listen: l.Addr().String()})
	if !errors.Is(err, ErrListen) || !strings.Contains(err.Error(), l.Addr().String()) || !strings.Contains(err.Error(), "--listen") {
		t.Fatalf("serve on a taken port: %v; want ErrListen naming %s and --listen", err, l.Addr())
	}
	serveForTest(t, dir, "127.0.0.1:-1").Shutdown()
}
