//go:build !race

package action

const raceDetector = false
