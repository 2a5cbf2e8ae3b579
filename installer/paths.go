package installer

import (
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
)

// Names shared by both operating systems.
const (
	// ServiceName is the name of the systemd unit (without .service) and of
	// the Windows service and Event Log source.
	ServiceName = "rxedge-agent"
	displayName = "RxEdge Agent"
	description = "RxEdge pharmacy edge agent: stores inventory movements durably and syncs them to central"

	linuxUser      = "rxedge"
	windowsVirtual = `NT SERVICE\` + ServiceName

	tokenFileName  = "ingest.token"
	configFileName = "agent.yaml"
)

// Paths are where the agent keeps its files and what the service is called
// on one operating system. Every path is absolute in that system's syntax.
type Paths struct {
	ConfigDir   string // directory of the config file and the ingest token
	ConfigFile  string // the agent's YAML config
	TokenFile   string // the local ingest token (P7), next to the config
	DataDir     string // the bbolt file and the control socket
	ServiceName string
	DisplayName string
	Description string
	// User is the account the service runs as: the system user "rxedge" on
	// Linux, the virtual account NT SERVICE\rxedge-agent on Windows.
	User string
}

// DefaultPaths returns the paths for goos ("linux" or "windows"). On Windows
// the base directory is %ProgramData% read from this process's environment;
// use DefaultPathsEnv to render them without depending on it.
func DefaultPaths(goos string) Paths {
	return DefaultPathsEnv(goos, os.Getenv)
}

// DefaultPathsEnv is DefaultPaths with the environment lookup injected.
//
// The Windows account is the virtual account NT SERVICE\rxedge-agent rather
// than LocalSystem: like the rxedge user on Linux it holds no privileges
// beyond what the agent's directories grant it (P7), Windows manages it with
// no password, and its SID is derived from the service name, so the ACLs can
// name it before the service exists.
func DefaultPathsEnv(goos string, getenv func(string) string) Paths {
	p := Paths{ServiceName: ServiceName, DisplayName: displayName, Description: description}
	if goos == "windows" {
		base := `C:\ProgramData`
		if getenv != nil {
			if v, err := cleanWindowsPath(getenv("ProgramData")); err == nil {
				base = v
			}
		}
		p.ConfigDir = joinPath(goos, base, "RxEdge")
		p.DataDir = joinPath(goos, p.ConfigDir, "data")
		p.User = windowsVirtual
	} else {
		p.ConfigDir = "/etc/rxedge"
		p.DataDir = "/var/lib/rxedge"
		p.User = linuxUser
	}
	p.ConfigFile = joinPath(goos, p.ConfigDir, configFileName)
	p.TokenFile = joinPath(goos, p.ConfigDir, tokenFileName)
	return p
}

// joinPath joins path elements in goos's syntax, whatever this process runs on.
func joinPath(goos string, elem ...string) string {
	if goos != "windows" {
		return path.Join(elem...)
	}
	var b strings.Builder
	for i, e := range elem {
		e = strings.Trim(e, `\`)
		if i == 0 {
			e = strings.TrimRight(elem[0], `\`)
		}
		if e == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('\\')
		}
		b.WriteString(e)
	}
	return b.String()
}

// dirPath returns the directory of p in goos's syntax.
func dirPath(goos, p string) string {
	if goos != "windows" {
		return path.Dir(p)
	}
	i := strings.LastIndex(p, `\`)
	if i <= 2 { // "C:\x" -> "C:\"
		return p[:min(len(p), 3)]
	}
	return p[:i]
}

// Paths on Linux end up in the unit file unquoted (ReadWritePaths,
// WorkingDirectory) and in ExecStart; keeping them to characters that need
// no escaping in any of those places makes the rendered unit exactly the
// installed one.
var linuxPathRE = regexp.MustCompile(`^(/[A-Za-z0-9._+@,=-]+)+$`)

// cleanLinuxPath checks that p is an absolute, clean Linux path.
func cleanLinuxPath(p string) (string, error) {
	switch {
	case p == "":
		return "", errEmptyPath
	case !path.IsAbs(p):
		return "", errRelativePath
	case p == "/":
		return "", errRootPath
	case path.Clean(p) != p:
		return "", errUncleanPath
	case !linuxPathRE.MatchString(p):
		return "", errPathChars
	}
	return p, nil
}

// windowsPathRE accepts a drive-letter path; characters that Windows forbids
// in names, '%' (the SCM expands %VAR% in a service's image path) and
// control characters are refused.
var windowsPathRE = regexp.MustCompile(`^[A-Za-z]:(\\[^\\/:*?"<>|%\x00-\x1f]+)+$`)

// cleanWindowsPath checks that p is an absolute drive-letter path and
// returns it with forward slashes turned into backslashes.
func cleanWindowsPath(p string) (string, error) {
	if p == "" {
		return "", errEmptyPath
	}
	p = strings.ReplaceAll(p, "/", `\`)
	if len(p) < 3 || p[1] != ':' || p[2] != '\\' {
		return "", errRelativePath // also drive-relative C:x and UNC \\server
	}
	p = strings.TrimRight(p, `\`)
	if len(p) == 2 {
		return "", errRootPath
	}
	for _, e := range strings.Split(p[3:], `\`) {
		if e == "" || e == "." || e == ".." || strings.HasSuffix(e, " ") || strings.HasSuffix(e, ".") {
			return "", errUncleanPath
		}
	}
	if !windowsPathRE.MatchString(p) {
		return "", errPathChars
	}
	return p, nil
}

// cleanPath checks p for goos.
func cleanPath(goos, p string) (string, error) {
	if goos == "windows" {
		return cleanWindowsPath(p)
	}
	return cleanLinuxPath(p)
}

// under reports whether p is dir or inside it (case-insensitive on Windows).
func under(goos, p, dir string) bool {
	sep := "/"
	if goos == "windows" {
		sep = `\`
		p, dir = strings.ToLower(p), strings.ToLower(dir)
	}
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, sep)+sep)
}

// Command is the name to type for this program in hints: the name it was
// run as (rxedge-agent when installed), or rxedge-agent when that name is
// not one a user would type (a test binary).
func Command() string { return commandName(os.Args[0]) }

func commandName(arg0 string) string {
	name := strings.TrimSuffix(filepath.Base(arg0), ".exe")
	if name == "" || name == "." || strings.HasSuffix(name, ".test") || strings.ContainsAny(name, " \t") {
		return "rxedge-agent"
	}
	return name
}

// IsServiceDataDir reports whether dir is the data directory of the
// system service as installed on this machine: the default one, or the
// data_dir of the installed configuration (when it can be read). A
// command about another directory (a trial, a test) has no service to
// speak of.
func IsServiceDataDir(dir string) bool {
	ps := DefaultPaths(runtime.GOOS)
	same := func(a, b string) bool {
		if a == "" || b == "" {
			return false
		}
		ca, errA := filepath.Abs(a)
		cb, errB := filepath.Abs(b)
		return errA == nil && errB == nil && filepath.Clean(ca) == filepath.Clean(cb)
	}
	if same(dir, ps.DataDir) {
		return true
	}
	if b, err := os.ReadFile(ps.ConfigFile); err == nil {
		if refs, err := ReadConfig(b); err == nil && same(dir, refs.DataDir) {
			return true
		}
	}
	return false
}
