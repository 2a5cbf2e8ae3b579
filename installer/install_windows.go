package installer

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"time"
	"unsafe"

	"github.com/kardianos/service"
	"golang.org/x/sys/windows"
	"golang.org/x/sys/windows/svc"
	"golang.org/x/sys/windows/svc/mgr"
)

// osHost carries out a plan on this Windows machine.
type osHost struct{}

func (osHost) preflight(p *Plan) error {
	if p.PackagedService {
		return checkPackagedService(p)
	}
	if err := checkFreshInstall(p); err != nil {
		return err
	}
	fi, err := os.Stat(p.Executable)
	if err != nil {
		return fmt.Errorf("installer: executable: %w", err)
	}
	if !fi.Mode().IsRegular() {
		return fmt.Errorf("installer: executable %s is not a regular file", p.Executable)
	}
	return nil
}

func (osHost) ensureUser(context.Context, *Plan) (bool, error) {
	// The virtual account exists as soon as the service does.
	return false, nil
}

// applyPerm replaces the DACL of path with the protected one of pm, so
// nothing is inherited from %ProgramData% (where Users may read).
func (osHost) applyPerm(path string, pm Perm) error {
	sd, err := windows.SecurityDescriptorFromString(pm.SDDL())
	if err != nil {
		return fmt.Errorf("parse %s: %w", pm.SDDL(), err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return err
	}
	return windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.DACL_SECURITY_INFORMATION|windows.PROTECTED_DACL_SECURITY_INFORMATION, nil, nil, dacl, nil)
}

// register creates the service through kardianos (which also registers
// the Event Log source and one recovery action), then sets what kardianos
// cannot express: three restart actions and the service SID type.
func (osHost) register(ctx context.Context, p *Plan) error {
	name := p.Paths.ServiceName
	if p.PackagedService {
		if err := configureService(name, p.Windows); err != nil {
			return fmt.Errorf("installer: configure %s: %w", name, err)
		}
		return nil
	}
	s, err := service.New(control{}, p.ServiceConfig())
	if err != nil {
		return fmt.Errorf("installer: register %s: %w", name, err)
	}
	if err := s.Install(); err != nil {
		return fmt.Errorf("installer: register %s: %w; fix the cause, run `"+Command()+" uninstall`, then install again", name, err)
	}
	if err := configureService(name, p.Windows); err != nil {
		return fmt.Errorf("installer: configure %s: %w; run `"+Command()+" uninstall`, then install again", name, err)
	}
	return nil
}

func configureService(name string, ws *WindowsService) error {
	m, err := mgr.Connect()
	if err != nil {
		return err
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return err
	}
	defer s.Close()
	sidType := uint32(windows.SERVICE_SID_TYPE_UNRESTRICTED)
	if err := windows.ChangeServiceConfig2(s.Handle, windows.SERVICE_CONFIG_SERVICE_SID_INFO, (*byte)(unsafe.Pointer(&sidType))); err != nil {
		return fmt.Errorf("set service SID type: %w", err)
	}
	if ws.DelayedAutoStart {
		// kardianos sets it when it registers; an MSI's ServiceInstall
		// table cannot, so it is set here for both.
		info := windows.SERVICE_DELAYED_AUTO_START_INFO{IsDelayedAutoStartUp: 1}
		if err := windows.ChangeServiceConfig2(s.Handle, windows.SERVICE_CONFIG_DELAYED_AUTO_START_INFO, (*byte)(unsafe.Pointer(&info))); err != nil {
			return fmt.Errorf("set delayed automatic start: %w", err)
		}
	}
	actions := make([]mgr.RecoveryAction, len(ws.Recovery))
	for i, d := range ws.Recovery {
		actions[i] = mgr.RecoveryAction{Type: mgr.ServiceRestart, Delay: d}
	}
	if err := s.SetRecoveryActions(actions, uint32(ws.ResetPeriod/time.Second)); err != nil {
		return fmt.Errorf("set recovery actions: %w", err)
	}
	return nil
}

// checkPackagedService checks that the MSI registered the service install
// is to prepare, with this executable.
func checkPackagedService(p *Plan) error {
	if p.GOOS != runtime.GOOS {
		return fmt.Errorf("installer: the plan is for %s; run `"+Command()+" install` on that system", p.GOOS)
	}
	if err := requireAdmin(); err != nil {
		return err
	}
	m, err := mgr.Connect()
	if err != nil {
		return fmt.Errorf("installer: connect to the service control manager: %w", err)
	}
	defer m.Disconnect()
	s, err := m.OpenService(p.Paths.ServiceName)
	if err != nil {
		return fmt.Errorf("installer: --msi: the service %s is not registered (%w); install the MSI, or leave --msi out", p.Paths.ServiceName, err)
	}
	defer s.Close()
	image, err := imagePath(s.Handle)
	if err != nil {
		return fmt.Errorf("installer: read the service %s: %w", p.Paths.ServiceName, err)
	}
	return checkPackagedImage(image, p)
}

// imagePath reads a service's command line with QueryServiceConfig alone
// (mgr's Config also queries optional settings, any of which may fail).
func imagePath(h windows.Handle) (string, error) {
	n := uint32(1024)
	for {
		b := make([]byte, n)
		c := (*windows.QUERY_SERVICE_CONFIG)(unsafe.Pointer(&b[0]))
		err := windows.QueryServiceConfig(h, c, n, &n)
		if err == nil {
			return windows.UTF16PtrToString(c.BinaryPathName), nil
		}
		if !errors.Is(err, windows.ERROR_INSUFFICIENT_BUFFER) || n <= uint32(len(b)) {
			return "", err
		}
	}
}

func supported() error { return nil }

func isAdmin() bool { return windows.GetCurrentProcessToken().IsElevated() }

// stopService stops the service and waits for it. kardianos's own Stop
// polls without ever honouring its timeout, so a stuck service would hang
// `agent stop`; this one ends with ctx.
func stopService(ctx context.Context, _ service.Service, name string) error {
	m, err := windows.OpenSCManager(nil, nil, windows.SC_MANAGER_CONNECT)
	if err != nil {
		return err
	}
	defer windows.CloseServiceHandle(m)
	namep, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return err
	}
	h, err := windows.OpenService(m, namep, windows.SERVICE_STOP|windows.SERVICE_QUERY_STATUS)
	if err != nil {
		return err
	}
	s := &mgr.Service{Name: name, Handle: h}
	defer s.Close()
	st, err := s.Control(svc.Stop)
	if errors.Is(err, windows.ERROR_SERVICE_NOT_ACTIVE) {
		return nil
	} else if err != nil {
		return err
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for st.State != svc.Stopped {
		select {
		case <-ctx.Done():
			return fmt.Errorf("still stopping after the deadline: %w", ctx.Err())
		case <-tick.C:
		}
		if st, err = s.Query(); err != nil {
			return err
		}
	}
	return nil
}

func restartService(ctx context.Context, s service.Service, name string) error {
	if err := stopService(ctx, s, name); err != nil {
		return err
	}
	return s.Start()
}

func afterUninstall(string) {}

// installedArgs reads the arguments of the registered service's image path.
func installedArgs(name string) ([]string, error) {
	m, err := mgr.Connect()
	if err != nil {
		return nil, err
	}
	defer m.Disconnect()
	s, err := m.OpenService(name)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	c, err := s.Config()
	if err != nil {
		return nil, err
	}
	args, err := windows.DecomposeCommandLine(c.BinaryPathName)
	if err != nil || len(args) == 0 {
		return nil, err
	}
	return args[1:], nil
}

// FindPackagedUnit returns "": Windows installs have no package unit.
func FindPackagedUnit() string { return "" }
