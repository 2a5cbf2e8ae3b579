//go:build race

package queue

// raceEnabled makes the big tests smaller under the race detector.
const raceEnabled = true
