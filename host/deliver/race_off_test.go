//go:build !race

package deliver

const raceEnabled = false
