package deliver

import (
	"math"
	"math/rand/v2"
	"time"
)

// Backoff is the retry policy for failures that may pass: the wait after the n-th failure in a
// row is Initial·Multiplier^(n-1), capped at Max, spread by ±Jitter so a fleet that failed
// together does not retry together. Zero fields take the defaults (5 s, 10 min, 2, 0.2).
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Multiplier float64
	Jitter     float64 // fraction of the wait, 0 ≤ Jitter < 1
}

func (b Backoff) withDefaults() Backoff {
	if b.Initial <= 0 {
		b.Initial = 5 * time.Second
	}
	if b.Max <= 0 {
		b.Max = 10 * time.Minute
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if b.Multiplier < 1 {
		b.Multiplier = 2
	}
	if b.Jitter < 0 || b.Jitter >= 1 {
		b.Jitter = 0.2
	}
	return b
}

// Delay is the wait after the n-th failure in a row (n ≥ 1). It is never less than
// Initial·(1−Jitter), so a caller that honours it never spins.
func (b Backoff) Delay(n int) time.Duration {
	b = b.withDefaults()
	if n < 1 {
		n = 1
	}
	d := float64(b.Initial) * math.Pow(b.Multiplier, float64(n-1))
	if d > float64(b.Max) || math.IsInf(d, 0) {
		d = float64(b.Max)
	}
	d *= 1 + b.Jitter*(2*rand.Float64()-1)
	return time.Duration(d)
}
