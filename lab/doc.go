// Package lab proves mesh-host on one machine with real parts: binaries built from this tree and a
// real NATS server.
//
// The binaries are built from this tree (the real launcher and host, and broken releases built from
// lab/fixtures), each node a real launcher process with its own root, and — from the link onward —
// a real NATS server. A Fleet is all of it at once: the bus (which can restart on its address and
// data), N nodes, the real mesh-release, and observers that record every heartbeat and count every
// read of an archive. Its tests are the process-level tests; `mesh-lab demo` tells the fleet's
// story to a person, and `mesh-lab up` leaves a fleet running for one.
package lab
