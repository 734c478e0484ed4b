// Package lab proves mesh-host on one machine with real parts: binaries built from this tree
// (the real launcher and host, and broken releases built from lab/fixtures), each node a real
// launcher process with its own root, and — from the link onward — a real NATS server. Its
// tests are the process-level tests; mesh-lab demo tells the same story to a person.
package lab
