package installer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"strconv"
	"strings"

	"github.com/kardianos/service"
)

// osHost carries out a plan on this Linux machine.
type osHost struct{}

func (osHost) preflight(p *Plan) error {
	if p.PackagedUnit != "" {
		// The package registered the service; install only prepares it.
		if p.GOOS != "linux" {
			return fmt.Errorf("installer: the plan is for %s; run `%s install` on that system", p.GOOS, Command())
		}
		return requireAdmin()
	}
	if err := checkFreshInstall(p); err != nil {
		return err
	}
	if _, err := os.Lstat(p.Unit.Path); err == nil {
		return fmt.Errorf("installer: %s exists although systemd does not list it; remove it (or run `"+Command()+" uninstall`) and install again", p.Unit.Path)
	}
	fi, err := os.Stat(p.Executable)
	if err != nil {
		return fmt.Errorf("installer: executable: %w", err)
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o001 == 0 {
		return fmt.Errorf("installer: executable %s (mode %04o) cannot be run by the %s user; `chmod 0755` it", p.Executable, uint32(fi.Mode().Perm()), p.Paths.User)
	}
	return nil
}

func (osHost) ensureUser(ctx context.Context, p *Plan) (bool, error) {
	name := p.Paths.User
	if _, err := user.Lookup(name); err == nil {
		return false, nil
	} else if !errors.As(err, new(user.UnknownUserError)) {
		return false, fmt.Errorf("installer: look up user %s: %w", name, err)
	}
	args := useraddArgs(name, p.Paths.DataDir)
	if _, err := exec.LookPath(args[0]); err != nil {
		return false, fmt.Errorf("installer: create user %s: useradd not found; create the system user yourself (adduser --system --group %s) and run install again", name, name)
	}
	out, err := exec.CommandContext(ctx, args[0], args[1:]...).CombinedOutput()
	if err != nil {
		return false, fmt.Errorf("installer: create user %s: %s: %w: %s", name, strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return true, nil
}

func (osHost) applyPerm(path string, pm Perm) error {
	uid, err := lookupUID(pm.Owner)
	if err != nil {
		return err
	}
	gid, err := lookupGID(pm.Group)
	if err != nil {
		return err
	}
	if err := os.Chown(path, uid, gid); err != nil {
		return err
	}
	return os.Chmod(path, pm.Mode)
}

func lookupUID(name string) (int, error) {
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("look up user %s: %w", name, err)
	}
	return strconv.Atoi(u.Uid)
}

// lookupGID finds the group name, or else the primary group of the user
// name (a --user created without a group of its own name).
func lookupGID(name string) (int, error) {
	if g, err := user.LookupGroup(name); err == nil {
		return strconv.Atoi(g.Gid)
	}
	u, err := user.Lookup(name)
	if err != nil {
		return 0, fmt.Errorf("look up group %s: no such group or user", name)
	}
	return strconv.Atoi(u.Gid)
}

func (osHost) register(ctx context.Context, p *Plan) error {
	if p.PackagedUnit != "" {
		return nil
	}
	s, err := service.New(control{}, p.ServiceConfig())
	if err != nil {
		return fmt.Errorf("installer: register %s: %w", p.Paths.ServiceName, err)
	}
	if err := s.Install(); err != nil {
		return fmt.Errorf("installer: register %s: %w; fix the cause, run `"+Command()+" uninstall`, then install again", p.Paths.ServiceName, err)
	}
	if got, err := os.ReadFile(p.Unit.Path); err != nil || string(got) != p.Unit.Text {
		// The unit is installed; say loudly that it is not the reviewed one.
		return fmt.Errorf("installer: %s differs from the dry-run unit (the kardianos template engine changed?); review it with `systemctl cat %s` before starting", p.Unit.Path, p.Paths.ServiceName)
	}
	return nil
}

// packagedUnitPaths are where a .deb or .rpm puts the agent's unit.
var packagedUnitPaths = []string{"/usr/lib/systemd/system/" + ServiceName + ".service", "/lib/systemd/system/" + ServiceName + ".service"}

// FindPackagedUnit returns the unit a package installed, or "" when the
// agent was not installed from a package (or an administrator's unit in
// /etc/systemd/system overrides it).
func FindPackagedUnit() string {
	if _, err := os.Lstat(systemdUnitDir + "/" + ServiceName + ".service"); err == nil {
		return ""
	}
	for _, p := range packagedUnitPaths {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return ""
}

// supported checks that systemd manages this machine: the custom unit is
// a systemd unit, and kardianos would otherwise pick another init system.
func supported() error {
	if sys := service.ChosenSystem(); sys == nil || sys.String() != "linux-systemd" {
		found := "none"
		if sys != nil {
			found = sys.String()
		}
		return fmt.Errorf("installer: systemd does not manage this machine (found %s); the agent installs as a systemd service only, use `"+Command()+" run` under your own supervisor", found)
	}
	return nil
}

func isAdmin() bool { return os.Geteuid() == 0 }

func stopService(_ context.Context, s service.Service, _ string) error {
	// systemctl stop returns when the unit has stopped, after at most
	// TimeoutStopSec.
	return s.Stop()
}

func restartService(_ context.Context, s service.Service, _ string) error {
	return s.Restart()
}

// afterUninstall forgets a failed state of the removed unit, so the next
// status reads "not installed".
func afterUninstall(name string) {
	exec.Command("systemctl", "reset-failed", name+".service").Run()
}

// installedArgs reads the arguments of the installed unit's ExecStart.
func installedArgs(name string) ([]string, error) {
	b, err := os.ReadFile(systemdUnitDir + "/" + name + ".service")
	if err != nil {
		return nil, err
	}
	return execStartArgs(string(b)), nil
}
