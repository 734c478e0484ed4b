package apply

import (
	"bytes"
	"fmt"
	"github.com/novox/mesh-host/internal/text"
)

// OutputMax is how much of a command's output (an action's, a container runtime's) a step's
// error or difference quotes.
const OutputMax = 512

// Output keeps the first and the last OutputMax/2 bytes written to it and counts the rest: a
// command's output is held bounded however much it writes, and both how it began and how it
// ended (where errors usually are) can be quoted.
type Output struct {
	head, tail []byte
	total      int
}

func (h *Output) Write(p []byte) (int, error) {
	n := len(p)
	h.total += n
	half := OutputMax / 2
	if k := min(half-len(h.head), len(p)); k > 0 {
		h.head = append(h.head, p[:k]...)
		p = p[k:]
	}
	h.tail = append(h.tail, p...)
	if len(h.tail) > half {
		h.tail = append(h.tail[:0], h.tail[len(h.tail)-half:]...)
	}
	return n, nil
}

// String is the output kept, trimmed, on one printable line, with how much was cut between.
func (h *Output) String() string {
	var s string
	if cut := h.total - len(h.head) - len(h.tail); cut > 0 {
		s = string(bytes.TrimSpace(h.head)) + fmt.Sprintf(" …[cut %d bytes]… ", cut) + string(bytes.TrimSpace(h.tail))
	} else {
		s = string(bytes.TrimSpace(append(append([]byte(nil), h.head...), h.tail...)))
	}
	return text.Printable(s)
}
