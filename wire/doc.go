// Package wire is the bus contract between hosts and the control side.
//
// It holds the names of the buckets, stream and subjects, and the JSON types sent over them. Both
// sides import it, so a change here is a change to the protocol; docs/wire.md describes it for
// other tools.
package wire
