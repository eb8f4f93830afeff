//go:build race

package sandbox

// raceDetector: this test binary runs under the race detector.
const raceDetector = true
