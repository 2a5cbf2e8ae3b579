package installer

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/kardianos/service"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/internal/disk"
	"github.com/rxedge/agent/notary"
)

// State is the service's state as `agent status` shows it.
type State string

// States of the service.
const (
	StateRunning      State = "running"
	StateStopped      State = "stopped"
	StateFailed       State = "failed" // systemd gave up on it, or it is restarting after a crash
	StateNotInstalled State = "not installed"
	StateUnknown      State = "unknown"
)

// Errors callers may branch on.
var (
	// ErrNotInstalled: start, stop or restart of a service that is not
	// installed.
	ErrNotInstalled = errors.New("installer: the service is not installed; run `" + Command() + " install` first")
	// ErrInstalled: install over an existing installation.
	ErrInstalled = errors.New("installer: the service is already installed; run `" + Command() + " uninstall` first (it keeps the data and config), then install again")
	// ErrNotAdmin: the operation needs root or an elevated Administrator.
	ErrNotAdmin = errors.New("installer: this needs administrator rights; run it as root (sudo) on linux or from an elevated prompt (Run as Administrator) on windows")
)

// host is what install needs from the operating system beyond plain file
// I/O: accounts, ownership and ACLs, and the service manager. Tests replace
// it to run the file steps of a plan in a temporary directory.
type host interface {
	// preflight refuses to start when the plan cannot succeed here.
	preflight(p *Plan) error
	// ensureUser creates the service's Linux user if missing.
	ensureUser(ctx context.Context, p *Plan) (created bool, err error)
	// applyPerm sets the owner and mode, or the protected DACL, of path.
	applyPerm(path string, pm Perm) error
	// register creates the service definition and enables it.
	register(ctx context.Context, p *Plan) error
}

// Install carries out p on this machine and reports each step on out. It
// is safe to run again after a failure: directories and permissions are
// set again, an existing token or config is kept.
func Install(ctx context.Context, p *Plan, out io.Writer) error {
	return install(ctx, p, out, osHost{})
}

func install(ctx context.Context, p *Plan, out io.Writer, h host) error {
	if err := h.preflight(p); err != nil {
		return err
	}
	if p.CreateUser {
		created, err := h.ensureUser(ctx, p)
		if err != nil {
			return err
		}
		if created {
			fmt.Fprintf(out, "created system user %s\n", p.Paths.User)
		} else {
			fmt.Fprintf(out, "system user %s exists\n", p.Paths.User)
		}
	}
	for _, d := range p.Dirs {
		if err := os.MkdirAll(d.Path, 0o750); err != nil {
			return fmt.Errorf("installer: create %s directory %s: %w", d.Purpose, d.Path, err)
		}
		if err := notSymlink(d.Path); err != nil {
			return err
		}
		if err := h.applyPerm(d.Path, d.Perm); err != nil {
			return fmt.Errorf("installer: set permissions of %s: %w", d.Path, err)
		}
		fmt.Fprintf(out, "%s directory %s ready\n", d.Purpose, d.Path)
	}
	for _, f := range []File{p.Token, p.Config} {
		content := f.Content
		if content == nil {
			content = newToken()
		}
		var check func(string) error
		if f.Path == p.Config.Path {
			check = p.Check
		}
		created, err := writeNew(f.Path, content, check)
		if err != nil {
			return fmt.Errorf("installer: write %s %s: %w", f.Purpose, f.Path, err)
		}
		if err := notSymlink(f.Path); err != nil {
			return err
		}
		if err := h.applyPerm(f.Path, f.Perm); err != nil {
			return fmt.Errorf("installer: set permissions of %s: %w", f.Path, err)
		}
		if created {
			fmt.Fprintf(out, "wrote %s %s\n", f.Purpose, f.Path)
			continue
		}
		fmt.Fprintf(out, "kept existing %s %s\n", f.Purpose, f.Path)
		if f.Path == p.Config.Path {
			for _, w := range checkExistingConfig(f.Path, p.Paths) {
				fmt.Fprintf(out, "warning: %s\n", w)
			}
			if p.Check != nil {
				if err := p.Check(f.Path); err != nil {
					return fmt.Errorf("installer: the existing %s is not valid, so the service is not installed: %w", f.Path, err)
				}
			}
		}
	}
	if err := protectSecrets(p, out, h); err != nil {
		return err
	}
	if err := writeLedgerKey(p, out, h); err != nil {
		return err
	}
	if err := h.register(ctx, p); err != nil {
		return err
	}
	fmt.Fprintf(out, "installed %s; start it with `"+Command()+" start`\n", p.Paths.ServiceName)
	return nil
}

// protectSecrets sets the permissions of the credential files the config
// names (Plan.Secrets), which must be there already: install never writes
// them, and a link is refused as for the config.
func protectSecrets(p *Plan, out io.Writer, h host) error {
	for _, f := range p.Secrets {
		fi, err := os.Lstat(f.Path)
		switch {
		case err != nil:
			return fmt.Errorf("installer: %s %s: %w: copy it onto this machine before installing", f.Purpose, f.Path, err)
		case !fi.Mode().IsRegular():
			return fmt.Errorf("installer: %s %s is not a regular file (a link, a folder?): put the file itself there and install again", f.Purpose, f.Path)
		}
		if err := h.applyPerm(f.Path, f.Perm); err != nil {
			return fmt.Errorf("installer: set permissions of %s: %w", f.Path, err)
		}
		fmt.Fprintf(out, "%s %s: permissions set as the config's\n", f.Purpose, f.Path)
	}
	return nil
}

// writeLedgerKey writes the store's signing key when missing, for the
// store_id of the config now in place, and sets its permissions; it
// prints the public key for the roster.
func writeLedgerKey(p *Plan, out io.Writer, h host) error {
	f := p.LedgerKey
	if f.Path == "" {
		return nil
	}
	b, err := os.ReadFile(p.Config.Path)
	if err != nil {
		return fmt.Errorf("installer: read %s: %w", p.Config.Path, err)
	}
	c, err := ReadConfig(b)
	if err != nil || !central.ValidStoreID(c.StoreID) {
		fmt.Fprintf(out, "no store_id in %s yet: the agent makes its ledger signing key at its first start (see agent status)\n", p.Config.Path)
		return nil
	}
	k, err := notary.LoadKey(f.Path, c.StoreID)
	created := false
	if errors.Is(err, notary.ErrNoKey) {
		k, err = notary.CreateKey(f.Path, c.StoreID)
		created = err == nil
	}
	if err != nil {
		return fmt.Errorf("installer: %s %s: %w", f.Purpose, f.Path, err)
	}
	if err := notSymlink(f.Path); err != nil {
		return err
	}
	if err := h.applyPerm(f.Path, f.Perm); err != nil {
		return fmt.Errorf("installer: set permissions of %s: %w", f.Path, err)
	}
	if created {
		fmt.Fprintf(out, "wrote %s %s\n", f.Purpose, f.Path)
	} else {
		fmt.Fprintf(out, "kept existing %s %s\n", f.Purpose, f.Path)
	}
	fmt.Fprintf(out, "roster line for this store: %s %s\n", c.StoreID, k.VKey)
	return nil
}

// notSymlink refuses a symbolic link where install sets ownership or an
// ACL: following it would hand the service's group whatever file it points
// to.
func notSymlink(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("installer: %w", err)
	}
	if fi.Mode()&fs.ModeSymlink != 0 {
		return fmt.Errorf("installer: %s is a symbolic link; replace it with the real file or directory and install again", path)
	}
	return nil
}

// newToken returns a fresh ingest token: 32 random bytes, hex encoded, no
// trailing newline.
func newToken() []byte {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand panics rather than return short)
	return []byte(hex.EncodeToString(b[:]))
}

// writeNew writes content to path only if nothing exists there, and
// reports whether it did. The file appears complete or not at all: the
// bytes go to a synced temporary file which is then hard-linked into place,
// and linking never replaces an existing file. check, when not nil, is
// given the temporary file first, and its error leaves nothing behind.
func writeNew(path string, content []byte, check func(string) error) (created bool, err error) {
	if _, err := os.Lstat(path); err == nil {
		return false, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return false, err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return false, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(content); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return false, err
	}
	if err := tmp.Close(); err != nil {
		return false, err
	}
	if check != nil {
		if err := check(tmp.Name()); err != nil {
			return false, fmt.Errorf("not written, it would not be valid: %w", err)
		}
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return false, nil
		}
		return false, err
	}
	_ = disk.SyncDir(filepath.Dir(path)) // best effort: the config is written
	return true, nil
}

// checkExistingConfig returns warnings when a config install kept does not
// point at the plan's data dir and token.
func checkExistingConfig(path string, ps Paths) []string {
	b, err := os.ReadFile(path)
	if err != nil {
		return []string{fmt.Sprintf("cannot read %s to check it: %v", path, err)}
	}
	c, err := ReadConfig(b)
	if err != nil {
		return []string{fmt.Sprintf("%s: %v; fix it before `"+Command()+" start`", path, err)}
	}
	data, token := c.DataDir, c.Ingest.TokenFile
	var w []string
	if token != ps.TokenFile {
		w = append(w, fmt.Sprintf("%s sets %s %q; set it to %s, or the ingest endpoint will not accept the installed token", path, keyTokenFile, token, ps.TokenFile))
	}
	if data != ps.DataDir {
		w = append(w, fmt.Sprintf("%s sets %s %q but the service may write only %s; set %s: %s", path, keyDataDir, data, ps.DataDir, keyDataDir, ps.DataDir))
	}
	return w
}

// useraddArgs is the command that creates the service's Linux user: a
// system account with its own group, no login shell and no home directory
// created (its home is the data dir, which install creates itself).
func useraddArgs(user, home string) []string {
	return []string{"useradd", "--system", "--user-group", "--no-create-home", "--home-dir", home, "--shell", "/usr/sbin/nologin", user}
}

// Uninstall stops the service and removes its definition (the unit file,
// or the SCM entry and Event Log source). It keeps the config, the token
// and the data dir, and says where they are. ps gives the service name and
// the paths to report when the installed definition cannot be read.
func Uninstall(ctx context.Context, ps Paths, out io.Writer) error {
	if err := requireAdmin(); err != nil {
		return err
	}
	if u := FindPackagedUnit(); u != "" {
		return fmt.Errorf("installer: %s was installed by a package (%s); remove it with the package manager (apt remove rxedge-agent, or dnf remove rxedge-agent), which also keeps the config and data", ps.ServiceName, u)
	}
	s, err := newControl(ps.ServiceName)
	if err != nil {
		return err
	}
	kept := keptPaths(ps)
	st, err := status(s)
	if err == nil && st == StateNotInstalled {
		fmt.Fprintf(out, "%s is not installed; nothing to remove\n", ps.ServiceName)
		printKept(out, kept)
		return nil
	}
	if st == StateRunning || st == StateFailed {
		ctx, cancel := withStopDeadline(ctx)
		defer cancel()
		if err := stopService(ctx, s, ps.ServiceName); err != nil {
			return fmt.Errorf("installer: uninstall %s: %w", ps.ServiceName, err)
		}
		fmt.Fprintf(out, "stopped %s\n", ps.ServiceName)
	}
	if err := s.Uninstall(); err != nil {
		return fmt.Errorf("installer: uninstall %s: %w; check `"+Command()+" status` and run uninstall again", ps.ServiceName, err)
	}
	afterUninstall(ps.ServiceName)
	fmt.Fprintf(out, "removed service %s\n", ps.ServiceName)
	printKept(out, kept)
	return nil
}

// keptPaths finds the config the installed service uses and the data dir
// and token that config names, falling back to ps.
func keptPaths(ps Paths) Paths {
	kept := ps
	if args, err := installedArgs(ps.ServiceName); err == nil {
		if c := configArg(args); c != "" {
			kept.ConfigFile = c
		}
	}
	if b, err := os.ReadFile(kept.ConfigFile); err == nil {
		if c, err := ReadConfig(b); err == nil {
			if c.DataDir != "" {
				kept.DataDir = c.DataDir
			}
			if c.Ingest.TokenFile != "" {
				kept.TokenFile = c.Ingest.TokenFile
			}
		}
	}
	return kept
}

func printKept(out io.Writer, ps Paths) {
	fmt.Fprintf(out, "kept config:       %s\n", ps.ConfigFile)
	fmt.Fprintf(out, "kept ingest token: %s\n", ps.TokenFile)
	fmt.Fprintf(out, "kept data:         %s (the queue, with any unsynced movements)\n", ps.DataDir)
	fmt.Fprintf(out, "remove them by hand only after every movement is synced and exported.\n")
}

// configArg returns the value of --config in a service's arguments.
func configArg(args []string) string {
	for i, a := range args {
		if a == "--config" && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--config="); ok {
			return v
		}
	}
	return ""
}

// Start asks the service manager to start the service; starting a running
// service succeeds.
func Start(ctx context.Context, name string) error {
	s, err := controlInstalled(name)
	if err != nil {
		return err
	}
	if st, err := status(s); err == nil && st == StateRunning {
		return nil
	}
	if err := s.Start(); err != nil {
		return fmt.Errorf("installer: start %s: %w; %s", name, err, logHint(name))
	}
	return nil
}

// Stop asks the service manager to stop the service and waits until it has
// stopped or ctx ends.
func Stop(ctx context.Context, name string) error {
	s, err := controlInstalled(name)
	if err != nil {
		return err
	}
	ctx, cancel := withStopDeadline(ctx)
	defer cancel()
	if err := stopService(ctx, s, name); err != nil {
		return fmt.Errorf("installer: stop %s: %w; %s", name, err, logHint(name))
	}
	return nil
}

// Restart stops the service, waiting as Stop does, and starts it again.
func Restart(ctx context.Context, name string) error {
	s, err := controlInstalled(name)
	if err != nil {
		return err
	}
	ctx, cancel := withStopDeadline(ctx)
	defer cancel()
	if err := restartService(ctx, s, name); err != nil {
		return fmt.Errorf("installer: restart %s: %w; %s", name, err, logHint(name))
	}
	return nil
}

// Status reports the service's state. It needs no administrator rights.
// When the state cannot be read it returns StateUnknown and the reason.
func Status(name string) (State, error) {
	s, err := newControl(name)
	if err != nil {
		return StateUnknown, err
	}
	return status(s)
}

// stopTimeout bounds Stop when ctx has no deadline: longer than the
// agent's own 10 s and systemd's TimeoutStopSec.
const stopTimeout = systemdStopAfter + 15*time.Second

// withStopDeadline gives ctx the stopTimeout deadline unless it has one.
func withStopDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, stopTimeout)
}

func controlInstalled(name string) (service.Service, error) {
	if err := requireAdmin(); err != nil {
		return nil, err
	}
	s, err := newControl(name)
	if err != nil {
		return nil, err
	}
	if st, err := status(s); err == nil && st == StateNotInstalled {
		return nil, ErrNotInstalled
	}
	return s, nil
}

// status maps kardianos's status to a State.
func status(s service.Service) (State, error) {
	st, err := s.Status()
	switch {
	case errors.Is(err, service.ErrNotInstalled):
		return StateNotInstalled, nil
	case err != nil && strings.Contains(err.Error(), "failed state"):
		// kardianos reports systemd's "failed" only as this text.
		return StateFailed, nil
	case err != nil:
		return StateUnknown, fmt.Errorf("installer: read service state: %w", err)
	case st == service.StatusRunning:
		return StateRunning, nil
	case st == service.StatusStopped:
		return StateStopped, nil
	}
	return StateUnknown, nil
}

// control is the do-nothing program kardianos needs to control a service
// from another process.
type control struct{}

func (control) Start(service.Service) error { return nil }
func (control) Stop(service.Service) error  { return nil }

// checkFreshInstall refuses a plan made for another system, a caller who is
// not an administrator, and a service that is installed already: the
// checks every system's preflight starts with.
func checkFreshInstall(p *Plan) error {
	if p.GOOS != runtime.GOOS {
		return fmt.Errorf("installer: the plan is for %s; run `"+Command()+" install` on that system", p.GOOS)
	}
	if err := requireAdmin(); err != nil {
		return err
	}
	s, err := newControl(p.Paths.ServiceName)
	if err != nil {
		return err
	}
	if st, err := status(s); err != nil {
		return err
	} else if st != StateNotInstalled {
		return ErrInstalled
	}
	return nil
}

func newControl(name string) (service.Service, error) {
	if err := supported(); err != nil {
		return nil, err
	}
	s, err := service.New(control{}, &service.Config{Name: name})
	if err != nil {
		return nil, fmt.Errorf("installer: open service %s: %w", name, err)
	}
	return s, nil
}

func requireAdmin() error {
	if !isAdmin() {
		return ErrNotAdmin
	}
	return nil
}

// logHint says where to look when the service manager refuses.
func logHint(name string) string {
	if runtime.GOOS == "windows" {
		return "see the Application event log, source " + name
	}
	return "see `journalctl -u " + name + "`"
}
