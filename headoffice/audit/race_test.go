//go:build race

package audit_test

// raceEnabled makes the big tests smaller under the race detector.
const raceEnabled = true
