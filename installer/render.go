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
	bw := bufio.NewWriter(w)
	ps := p.Paths
	manager := "systemd"
	if p.GOOS == "windows" {
		manager = "Windows service control manager"
	}
	fmt.Fprintf(bw, "# %s: install plan for %s (%s). Dry run: nothing was changed.\n\n", ps.ServiceName, p.GOOS, manager)
	account := ps.User + " (system user, no login shell)"
	if p.GOOS == "windows" {
		account = fmt.Sprintf("%s (SID %s)", ps.User, p.Windows.AccountSID)
	}
	for _, kv := range [][2]string{
		{"service", ps.ServiceName},
		{"display name", ps.DisplayName},
		{"account", account},
		{"executable", p.Executable},
		{"config file", ps.ConfigFile},
		{"ingest token", ps.TokenFile},
		{"data dir", ps.DataDir},
	} {
		fmt.Fprintf(bw, "%-14s%s\n", kv[0]+":", kv[1])
	}
	fmt.Fprintf(bw, "\nSteps:\n")
	n := 0
	step := func(format string, a ...any) {
		n++
		fmt.Fprintf(bw, "%2d. %s\n", n, fmt.Sprintf(format, a...))
	}
	detail := func(format string, a ...any) {
		fmt.Fprintf(bw, "      %s\n", fmt.Sprintf(format, a...))
	}
	block := func(name, text string) {
		fmt.Fprintf(bw, "----- begin %s -----\n", name)
		bw.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			bw.WriteString("\n")
		}
		fmt.Fprintf(bw, "----- end %s -----\n", name)
	}
	perm := func(pm Perm, path string) {
		if p.GOOS == "windows" {
			detail("grants: %s", pm.grants())
			detail("DACL (protected, nothing inherited): %s", pm.SDDL())
			detail("same as: %s", pm.icacls(path))
			return
		}
		detail("mode %04o, owner %s:%s", uint32(pm.Mode.Perm()), pm.Owner, pm.Group)
	}

	if p.GOOS == "windows" {
		step("Check that the process is elevated (run as Administrator) and %s is not installed yet.", ps.ServiceName)
	} else {
		step("Check that the process runs as root, systemd manages this machine and %s is not installed yet.", ps.ServiceName)
	}
	if p.CreateUser {
		step("Create the system user %s if it does not exist:", ps.User)
		detail("%s", strings.Join(useraddArgs(ps.User, ps.DataDir), " "))
	}
	for _, d := range p.Dirs {
		step("Create the %s directory %s if missing and set its permissions:", d.Purpose, d.Path)
		perm(d.Perm, d.Path)
	}
	step("Write the %s %s if missing (32 random bytes, hex); an existing token is kept. Set its permissions:", p.Token.Purpose, p.Token.Path)
	perm(p.Token.Perm, p.Token.Path)
	step("Write the config %s if missing; an existing config is kept. Set its permissions:", p.Config.Path)
	perm(p.Config.Perm, p.Config.Path)
	block(p.Config.Path, string(p.Config.Content))

	if p.Unit != nil {
		step("Write the systemd unit %s (mode 0644):", p.Unit.Path)
		block(p.Unit.Path, p.Unit.Text)
		step("systemctl enable %s.service", ps.ServiceName)
		step("systemctl daemon-reload")
		fmt.Fprintf(bw, "\nLogs: JSON on stderr, collected by journald: journalctl -u %s\n", ps.ServiceName)
	}
	if p.PackagedUnit != "" {
		step("Use the unit %s installed by the package (it is enabled already; no unit is written)", p.PackagedUnit)
		fmt.Fprintf(bw, "\nLogs: JSON on stderr, collected by journald: journalctl -u %s\n", ps.ServiceName)
	}
	if ws := p.Windows; ws != nil {
		step("Register the service %s with the service control manager:", ps.ServiceName)
		detail("image path:   %s", ws.BinaryPath)
		detail("display name: %s", ps.DisplayName)
		detail("description:  %s", ps.Description)
		detail("account:      %s (no password)", ws.Account)
		start := ws.StartType
		if ws.DelayedAutoStart {
			start += ", delayed start"
		}
		detail("start type:   %s", start)
		step("Register the Event Log source %s (Application log, message file %%SystemRoot%%\\System32\\EventCreate.exe) for start, stop and alarm events.", ws.EventSource)
		step("Set the service SID type to unrestricted, so the ACLs above can name %s.", ws.Account)
		var acts, sc []string
		for _, d := range ws.Recovery {
			acts = append(acts, "restart after "+d.String())
			sc = append(sc, fmt.Sprintf("restart/%d", d/time.Millisecond))
		}
		step("Set the recovery actions: %s; reset the failure count after %s without a failure.", strings.Join(acts, ", "), days(ws.ResetPeriod))
		detail("same as: sc.exe failure %s reset= %d actions= %s", ps.ServiceName, ws.ResetPeriod/time.Second, strings.Join(sc, "/"))
		fmt.Fprintf(bw, "\nLogs: start, stop, warnings and errors go to the Application event log, source %s.\n", ws.EventSource)
	}
	fmt.Fprintf(bw, "Then start it with: agent start\n")
	fmt.Fprintf(bw, "Uninstall (agent uninstall) removes the service only; %s, %s and %s are kept.\n", ps.ConfigFile, ps.TokenFile, ps.DataDir)
	return bw.Flush()
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
