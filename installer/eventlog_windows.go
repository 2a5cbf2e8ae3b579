package installer

import (
	"fmt"
	"io"

	"github.com/kardianos/service"
	"golang.org/x/sys/windows/svc/eventlog"
)

// openEventLog opens the event source when running as a service; from a
// console the records already reach the terminal.
func openEventLog(name string) (eventSink, io.Closer, error) {
	if service.Interactive() {
		return nil, nil, nil
	}
	l, err := eventlog.Open(name)
	if err != nil {
		return nil, nil, fmt.Errorf("installer: open event log source %s: %w; reinstall the service to register it", name, err)
	}
	return l, l, nil
}
