// Package version holds the build stamp of the agent binary: the release
// version, the commit and the build date. Release builds set them with
// -ldflags "-X github.com/rxedge/agent/internal/version.Version=…"; a plain
// `go build` leaves the defaults, and the commit is then read from the Go
// build information when it is available.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Stamped at link time by scripts/release.sh.
var (
	Version = "dev"
	Commit  = ""
	Date    = ""
)

// Info is the build stamp.
type Info struct {
	Version   string `json:"version"`
	Commit    string `json:"commit"`
	Date      string `json:"date"`
	GoVersion string `json:"go_version"`
	Platform  string `json:"platform"`
}

// Get returns the build stamp, filling the commit and date from the Go
// build information when they were not stamped.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, Date: Date, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
				}
			case "vcs.time":
				if i.Date == "" {
					i.Date = s.Value
				}
			}
		}
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if i.Date == "" {
		i.Date = "unknown"
	}
	return i
}

// String is the one-line form printed by `agent version`.
func (i Info) String() string {
	return fmt.Sprintf("rxedge agent %s (commit %s, built %s, %s, %s)", i.Version, i.Commit, i.Date, i.GoVersion, i.Platform)
}
