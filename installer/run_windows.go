package installer

import (
	"os"

	"github.com/kardianos/service"
)

// runService runs p under the SCM when the SCM started this process; from a
// console it leaves p to serve.
func runService(name string, p *program) (bool, error) {
	if service.Interactive() {
		return false, nil
	}
	// The SCM only sees a failure if the process ends without reporting
	// "stopped"; exiting here makes it apply the recovery actions.
	p.onEarlyExit = func(error) { os.Exit(1) }
	s, err := service.New(p, &service.Config{Name: name})
	if err != nil {
		return true, err
	}
	return true, s.Run()
}

// UnderServiceManager reports whether the service control manager started
// this process.
func UnderServiceManager() bool { return !service.Interactive() }
