//go:build !race

package testkit

// RaceDetector is true in a test binary built with -race.
const RaceDetector = false
