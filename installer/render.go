package installer

import (
	"bufio"
	"fmt"
	"io"
	"strings"
	"time"
)

// Render writes the plan for review, in the order Install carries it out.
// The output depends only on the plan, so it is the same on every machine;
// it contains the full unit file or service definition and config, but
// never the ingest token, which is generated at install time.
func (p *Plan) Render(w io.Writer) error {
	r := &renderer{w: bufio.NewWriter(w), windows: p.GOOS == "windows"}
	ps := p.Paths
	r.summary(p)
	fmt.Fprintf(r.w, "\nSteps:\n")
	r.filesSteps(p)
	if p.Unit != nil {
		r.step("Write the systemd unit %s (mode 0644):", p.Unit.Path)
		r.block(p.Unit.Path, p.Unit.Text)
		r.step("systemctl enable %s.service", ps.ServiceName)
		r.step("systemctl daemon-reload")
		fmt.Fprintf(r.w, "\nLogs: JSON on stderr, collected by journald: journalctl -u %s\n", ps.ServiceName)
	}
	if p.PackagedUnit != "" {
		r.step("Use the unit %s installed by the package (it is enabled already; no unit is written)", p.PackagedUnit)
		fmt.Fprintf(r.w, "\nLogs: JSON on stderr, collected by journald: journalctl -u %s\n", ps.ServiceName)
	}
	if p.Windows != nil {
		r.windowsSteps(ps, p.Windows, p.PackagedService)
	}
	fmt.Fprintf(r.w, "Then start it with: agent start\n")
	fmt.Fprintf(r.w, "Uninstall (agent uninstall) removes the service only; %s, %s and %s are kept.\n", ps.ConfigFile, ps.TokenFile, ps.DataDir)
	return r.w.Flush()
}

// renderer writes a plan's numbered steps and their details.
type renderer struct {
	w       *bufio.Writer
	windows bool
	n       int // steps so far
}

func (r *renderer) step(format string, a ...any) {
	r.n++
	fmt.Fprintf(r.w, "%2d. %s\n", r.n, fmt.Sprintf(format, a...))
}

func (r *renderer) detail(format string, a ...any) {
	fmt.Fprintf(r.w, "      %s\n", fmt.Sprintf(format, a...))
}

// block writes text between begin and end lines naming it.
func (r *renderer) block(name, text string) {
	fmt.Fprintf(r.w, "----- begin %s -----\n", name)
	r.w.WriteString(text)
	if !strings.HasSuffix(text, "\n") {
		r.w.WriteString("\n")
	}
	fmt.Fprintf(r.w, "----- end %s -----\n", name)
}

// perm details the permissions install sets on path.
func (r *renderer) perm(pm Perm, path string) {
	if r.windows {
		r.detail("grants: %s", pm.grants())
		r.detail("DACL (protected, nothing inherited): %s", pm.SDDL())
		r.detail("same as: %s", pm.icacls(path))
		return
	}
	r.detail("mode %04o, owner %s:%s", uint32(pm.Mode.Perm()), pm.Owner, pm.Group)
}

// summary is the plan's heading: the service, its account and its paths.
func (r *renderer) summary(p *Plan) {
	ps := p.Paths
	manager, account := "systemd", ps.User+" (system user, no login shell)"
	if r.windows {
		manager, account = "Windows service control manager", fmt.Sprintf("%s (SID %s)", ps.User, p.Windows.AccountSID)
	}
	fmt.Fprintf(r.w, "# %s: install plan for %s (%s). Dry run: nothing was changed.\n\n", ps.ServiceName, p.GOOS, manager)
	for _, kv := range [][2]string{
		{"service", ps.ServiceName},
		{"display name", ps.DisplayName},
		{"account", account},
		{"executable", p.Executable},
		{"config file", ps.ConfigFile},
		{"ingest token", ps.TokenFile},
		{"data dir", ps.DataDir},
	} {
		fmt.Fprintf(r.w, "%-14s%s\n", kv[0]+":", kv[1])
	}
}

// filesSteps are the checks and the account, directories, token and
// config install prepares on either system.
func (r *renderer) filesSteps(p *Plan) {
	ps := p.Paths
	if r.windows {
		if p.PackagedService {
			r.step("Check that the process is elevated (run as Administrator) and the Windows Installer package registered %s with this executable.", ps.ServiceName)
		} else {
			r.step("Check that the process is elevated (run as Administrator) and %s is not installed yet.", ps.ServiceName)
		}
	} else {
		r.step("Check that the process runs as root, systemd manages this machine and %s is not installed yet.", ps.ServiceName)
	}
	if p.CreateUser {
		r.step("Create the system user %s if it does not exist:", ps.User)
		r.detail("%s", strings.Join(useraddArgs(ps.User, ps.DataDir), " "))
	}
	for _, d := range p.Dirs {
		r.step("Create the %s directory %s if missing and set its permissions:", d.Purpose, d.Path)
		r.perm(d.Perm, d.Path)
	}
	r.step("Write the %s %s if missing (32 random bytes, hex); an existing token is kept. Set its permissions:", p.Token.Purpose, p.Token.Path)
	r.perm(p.Token.Perm, p.Token.Path)
	r.step("Write the config %s if missing; an existing config is kept. Set its permissions:", p.Config.Path)
	r.perm(p.Config.Perm, p.Config.Path)
	r.block(p.Config.Path, redactSecrets(string(p.Config.Content)))
	for _, f := range p.Secrets {
		r.step("Keep the %s %s as it is (it must be there) and set its permissions as the config's:", f.Purpose, f.Path)
		r.perm(f.Perm, f.Path)
	}
	if p.LedgerKey.Path != "" {
		r.step("Write the %s %s if missing (a new key named for the config's store_id; its public key goes into the roster); an existing key is kept. Set its permissions:", p.LedgerKey.Purpose, p.LedgerKey.Path)
		r.perm(p.LedgerKey.Perm, p.LedgerKey.Path)
	}
}

// windowsSteps register the service with the service control manager, or
// (packaged) use the one the Windows Installer package registered, and set
// what neither kardianos nor the package's tables can.
func (r *renderer) windowsSteps(ps Paths, ws *WindowsService, packaged bool) {
	if packaged {
		r.step("Use the service %s the Windows Installer package registered (account %s, %s start, Event Log source %s); it is not registered again.", ps.ServiceName, ws.Account, ws.StartType, ws.EventSource)
	} else {
		r.step("Register the service %s with the service control manager:", ps.ServiceName)
		r.detail("image path:   %s", ws.BinaryPath)
		r.detail("display name: %s", ps.DisplayName)
		r.detail("description:  %s", ps.Description)
		r.detail("account:      %s (no password)", ws.Account)
		start := ws.StartType
		if ws.DelayedAutoStart {
			start += ", delayed start"
		}
		r.detail("start type:   %s", start)
		r.step("Register the Event Log source %s (Application log, message file %%SystemRoot%%\\System32\\EventCreate.exe) for start, stop and alarm events.", ws.EventSource)
	}
	r.step("Set the service SID type to unrestricted, so the ACLs above can name %s.", ws.Account)
	var acts, sc []string
	for _, d := range ws.Recovery {
		acts = append(acts, "restart after "+d.String())
		sc = append(sc, fmt.Sprintf("restart/%d", d/time.Millisecond))
	}
	r.step("Set the recovery actions: %s; reset the failure count after %s without a failure.", strings.Join(acts, ", "), days(ws.ResetPeriod))
	r.detail("same as: sc.exe failure %s reset= %d actions= %s", ps.ServiceName, ws.ResetPeriod/time.Second, strings.Join(sc, "/"))
	fmt.Fprintf(r.w, "\nLogs: start, stop, warnings and errors go to the Application event log, source %s.\n", ws.EventSource)
}

// days formats a whole number of days, else a plain duration.
func days(d time.Duration) string {
	const day = 24 * time.Hour
	switch {
	case d == day:
		return "1 day"
	case d%day == 0:
		return fmt.Sprintf("%d days", d/day)
	}
	return d.String()
}
