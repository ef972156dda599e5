//go:build race

package action

// raceDetector: this test binary runs under the race detector, where the
// simulations here run at a tenth of their size.
const raceDetector = true
