//go:build race

package rollback

// raceBuild: the race detector multiplies SQLite's cost (pure Go) about tenfold; the long,
// single-goroutine pruning tests run in make test's second pass, without it.
const raceBuild = true
