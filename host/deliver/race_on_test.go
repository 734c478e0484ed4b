//go:build race

package deliver

// raceEnabled: under the race detector hashing and decompression run ~20x slower, so the
// crash test stages a smaller binary.
const raceEnabled = true
