package installer

import (
	"errors"
	"testing"

	"github.com/kardianos/service"
)

// fakeService answers Status; the other methods are not called.
type fakeService struct {
	service.Service
	st  service.Status
	err error
}

func (f fakeService) Status() (service.Status, error) { return f.st, f.err }

// TestStatus pins the mapping of kardianos's answers, including the one it
// gives only as text: systemd's "failed" state (service_systemd_linux.go in
// kardianos v1.3.0 returns errors.New("service in failed state")).
func TestStatus(t *testing.T) {
	cases := []struct {
		name    string
		st      service.Status
		err     error
		want    State
		wantErr bool
	}{
		{"running", service.StatusRunning, nil, StateRunning, false},
		{"stopped", service.StatusStopped, nil, StateStopped, false},
		{"not installed", service.StatusUnknown, service.ErrNotInstalled, StateNotInstalled, false},
		{"failed", service.StatusUnknown, errors.New("service in failed state"), StateFailed, false},
		{"other error", service.StatusUnknown, errors.New("access denied"), StateUnknown, true},
		{"unknown", service.StatusUnknown, nil, StateUnknown, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := status(fakeService{st: tc.st, err: tc.err})
			if got != tc.want || (err != nil) != tc.wantErr {
				t.Errorf("got %q, %v; want %q, error %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
