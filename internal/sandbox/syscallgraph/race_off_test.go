//go:build !race

package syscallgraph

// raceDetector: this test binary runs under the race detector, under
// which loading and analysing a program takes several times as long.
const raceDetector = false
