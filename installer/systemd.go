package installer

import (
	"github.com/rxedge/agent/notary"

	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/kardianos/service"
)

// unitTemplate is passed to kardianos as its SystemdScript option and
// rendered by kardianos at install time. kardianos/service v1.3.0 renders
// service files with its own small engine, not text/template: keys are
// written {{Key}} (no dot), piped through its cmd (quote) and cmdEscape
// (spaces as \x20) functions, and lists are walked with {{range Key}} and
// {{.}}. renderUnit implements that subset so the dry run shows the bytes
// kardianos writes; it refuses every other construct, so a change to this
// template that it cannot render exactly fails the tests instead of
// drifting.
//
// Why each setting:
//   - After=network.target, not network-online.target: the agent is
//     offline-first and must accept movements at boot without a network;
//     the ordering still stops it before networking goes down, so
//     in-flight publishes can finish.
//   - StartLimitIntervalSec=0: a store PC nobody watches must never give
//     up restarting the agent.
//   - Restart=on-failure, RestartSec=5: come back 5 s after a crash
//     (kardianos's built-in unit waits a fixed 120 s).
//   - TimeoutStopSec=30: the agent stops within 10 s (Run); the margin
//     covers a slow disk before systemd sends SIGKILL.
//   - No ConditionFileIsExecutable (kardianos's default has it): a missing
//     binary should fail loudly, not leave the unit silently skipped.
//   - Type=notify, WatchdogSec=30: the unit is active only once the agent
//     accepts movements (it sends READY=1 then), and systemd restarts an
//     agent that stops answering its own control socket for 30 s (it
//     pings every 15 s while it does). NotifyAccess=main: only the agent.
//   - UMask=0027: the bbolt file and socket are not world-readable.
//   - The rest is sandboxing, to an exposure of 1.x in `systemd-analyze
//     security`: the service can write only its data dir, sees no other
//     process, device, home or kernel setting, holds no capability and
//     may make only the system calls of an ordinary network service
//     (others fail with EPERM rather than killing it). Left open, because
//     the agent needs them: AF_INET/AF_INET6 and an unrestricted IP
//     address range (central is wherever the chain runs it), AF_UNIX (the
//     control socket), and the user's own network namespace
//     (PrivateNetwork would cut it off from central).
const unitTemplate = `[Unit]
Description={{Description}}
After=network.target
StartLimitIntervalSec=0

[Service]
Type=notify
NotifyAccess=main
WatchdogSec=30
ExecStart={{Path | cmdEscape}}{{range Arguments}} {{. | cmd}}{{end}}
User={{UserName}}
WorkingDirectory={{WorkingDirectory | cmdEscape}}
SyslogIdentifier={{Name}}
Restart=on-failure
RestartSec=5
TimeoutStopSec=30
UMask=0027
NoNewPrivileges=yes
ProtectSystem=strict
ReadWritePaths={{WorkingDirectory | cmdEscape}}
PrivateTmp=yes
PrivateDevices=yes
PrivateUsers=yes
PrivateIPC=yes
ProtectHome=yes
ProtectProc=invisible
ProcSubset=pid
ProtectClock=yes
ProtectHostname=yes
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
RestrictNamespaces=yes
RestrictRealtime=yes
RestrictSUIDSGID=yes
RemoveIPC=yes
LockPersonality=yes
MemoryDenyWriteExecute=yes
KeyringMode=private
DevicePolicy=closed
CapabilityBoundingSet=
AmbientCapabilities=
SystemCallArchitectures=native
SystemCallFilter=@system-service
SystemCallFilter=~@privileged @resources
SystemCallErrorNumber=EPERM
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6

[Install]
WantedBy=multi-user.target
`

// systemdUnitDir is where kardianos writes a system (not user) unit.
const systemdUnitDir = "/etc/systemd/system"

// prepareLinux fills the Linux parts of p.
func prepareLinux(p *Plan) error {
	ps := p.Paths
	p.CreateUser = true
	p.Dirs = []Dir{
		{Purpose: "config", Path: ps.ConfigDir, Perm: Perm{Mode: 0o750, Owner: "root", Group: ps.User}},
		{Purpose: "data", Path: ps.DataDir, Perm: Perm{Mode: 0o750, Owner: ps.User, Group: ps.User}},
	}
	filePerm := Perm{Mode: 0o640, Owner: "root", Group: ps.User}
	p.Token = File{Purpose: "ingest token", Path: ps.TokenFile, Perm: filePerm}
	p.Config = File{Purpose: "config", Path: ps.ConfigFile, Perm: filePerm}
	p.LedgerKey = File{Purpose: "ledger signing key", Path: joinPath("linux", ps.DataDir, notary.KeyFileName), Perm: Perm{Mode: 0o600, Owner: ps.User, Group: ps.User}}
	text, err := renderUnit(unitTemplate, unitData(p.ServiceConfig()))
	if err != nil {
		return fmt.Errorf("installer: render systemd unit: %w", err)
	}
	p.Unit = &Unit{Path: systemdUnitDir + "/" + ps.ServiceName + ".service", Text: text}
	return nil
}

// unitData mirrors the data map kardianos v1.3.0 builds in
// (*systemd).Install for the options ServiceConfig sets (LogOutput off,
// no LimitNOFILE, ReloadSignal, PIDFile or SuccessExitStatus, Restart at
// its default). Path is c.Executable: kardianos passes it through
// filepath.Abs, which leaves a clean absolute path as it is.
func unitData(c *service.Config) map[string]any {
	var env []string
	for _, k := range slices.Sorted(maps.Keys(c.EnvVars)) {
		env = append(env, "Environment="+k+"="+c.EnvVars[k])
	}
	return map[string]any{
		"Description":       c.Description,
		"Path":              c.Executable,
		"Name":              c.Name,
		"Dependencies":      c.Dependencies,
		"Arguments":         c.Arguments,
		"ChRoot":            c.ChRoot,
		"WorkingDirectory":  c.WorkingDirectory,
		"UserName":          c.UserName,
		"ReloadSignal":      "",
		"PIDFile":           "",
		"LogDirectory":      "/var/log",
		"OutputFileSupport": "",
		"LimitNOFILE":       "",
		"Restart":           "always",
		"SuccessExitStatus": "",
		"EnvVars":           env,
	}
}

// unitFuncs are kardianos's template functions (cmdQuote and cmdEscape in
// its service_linux.go).
var unitFuncs = map[string]func(string) string{
	"cmd":       func(s string) string { return `"` + strings.ReplaceAll(s, `"`, `\"`) + `"` },
	"cmdEscape": func(s string) string { return strings.ReplaceAll(s, " ", `\x20`) },
}

// renderUnit renders the subset of kardianos's template language that
// unitTemplate uses: {{Key}}, {{Key | fn | fn}}, and {{range Key}}…{{end}}
// with {{.}} or {{. | fn}} inside. Anything else is an error.
func renderUnit(tmpl string, data map[string]any) (string, error) {
	var b strings.Builder
	rest, err := renderNodes(&b, tmpl, data, nil, false)
	if err != nil {
		return "", err
	}
	if rest != "" {
		return "", fmt.Errorf("unexpected {{end}}")
	}
	return b.String(), nil
}

// renderNodes renders src until its end or, inside a range, until the
// matching {{end}}, and returns what follows that {{end}}.
func renderNodes(b *strings.Builder, src string, data map[string]any, dot *string, inRange bool) (string, error) {
	for {
		open := strings.Index(src, "{{")
		if open < 0 {
			if inRange {
				return "", fmt.Errorf("{{range}} without {{end}}")
			}
			b.WriteString(src)
			return "", nil
		}
		b.WriteString(src[:open])
		n := strings.Index(src[open:], "}}")
		if n < 0 {
			return "", fmt.Errorf(`unclosed "{{"`)
		}
		action := src[open+2 : open+n]
		src = src[open+n+2:]
		if strings.HasPrefix(action, "-") || strings.HasSuffix(action, "-") {
			return "", fmt.Errorf("trim markers in %q are not supported here", action)
		}
		action = strings.TrimSpace(action)
		kw, arg, _ := strings.Cut(action, " ")
		switch kw {
		case "end":
			if !inRange {
				return "", fmt.Errorf("unexpected {{end}}")
			}
			return src, nil
		case "range":
			v, ok := data[strings.TrimSpace(arg)].([]string)
			if !ok {
				return "", fmt.Errorf("range key %q is not a list", arg)
			}
			var after string
			if len(v) == 0 {
				// Render into a throwaway builder only to find the {{end}}.
				var discard strings.Builder
				empty := ""
				var err error
				if after, err = renderNodes(&discard, src, data, &empty, true); err != nil {
					return "", err
				}
			}
			for i := range v {
				var err error
				if after, err = renderNodes(b, src, data, &v[i], true); err != nil {
					return "", err
				}
			}
			src = after
		case "if", "else", "with", "define", "template", "block":
			return "", fmt.Errorf("{{%s}} is not supported here", kw)
		default:
			parts := strings.Split(action, "|")
			key := strings.TrimSpace(parts[0])
			var s string
			if key == "." {
				if dot == nil {
					return "", fmt.Errorf("{{.}} outside {{range}}")
				}
				s = *dot
			} else {
				v, ok := data[key].(string)
				if !ok {
					return "", fmt.Errorf("template key %q is unknown or not a string", key)
				}
				s = v
			}
			for _, name := range parts[1:] {
				fn, ok := unitFuncs[strings.TrimSpace(name)]
				if !ok {
					return "", fmt.Errorf("unknown template function %q", name)
				}
				s = fn(s)
			}
			b.WriteString(s)
		}
	}
}

// PackageExecutable is where the .deb and .rpm put the agent.
const PackageExecutable = "/usr/bin/rxedge-agent"

// PackageUnit is the unit the .deb and .rpm install: the one install
// writes for PackageExecutable and the default paths, with one addition:
// it starts only once the config exists, because the package cannot know
// the store (`rxedge-agent install --store-id … --nats …` writes it).
func PackageUnit() (string, error) {
	p, err := Prepare(Spec{GOOS: "linux", Executable: PackageExecutable, ConfigTemplate: []byte("store_id: S0000\n")})
	if err != nil {
		return "", err
	}
	const after = "StartLimitIntervalSec=0\n"
	if !strings.Contains(p.Unit.Text, after) {
		return "", fmt.Errorf("installer: the unit has no %q line to add the config condition after", strings.TrimSpace(after))
	}
	return strings.Replace(p.Unit.Text, after, after+"ConditionPathExists="+p.Paths.ConfigFile+"\n", 1), nil
}
