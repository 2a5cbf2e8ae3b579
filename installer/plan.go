package installer

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/kardianos/service"
	"go.yaml.in/yaml/v3"
)

// Config keys the installed config must set, checked in the rendered
// template and reported when an existing config lacks them.
const (
	keyDataDir   = "data_dir"
	keyTokenFile = "ingest.token_file"
)

// Timings of the service definition (issue: restart 5 s after a failure,
// Windows resets its failure count after a day, systemd kills after 30 s).
const (
	restartDelay     = 5 * time.Second
	restartAttempts  = 3
	resetPeriod      = 24 * time.Hour
	systemdStopAfter = 30 * time.Second
)

// Errors about a single path, wrapped with the flag that gave it.
var (
	errEmptyPath    = errors.New("path is empty")
	errRelativePath = errors.New("path is not absolute")
	errRootPath     = errors.New("path is a filesystem root")
	errUncleanPath  = errors.New("path has empty, '.' or '..' elements or a trailing separator")
	errPathChars    = errors.New("path has characters the service definition cannot carry unescaped (spaces, quotes, %, $, backslashes on linux)")
)

// ErrUnsupported is returned for an operating system the agent does not
// install on.
var ErrUnsupported = errors.New("installer: only linux (systemd) and windows are supported")

// Spec is what `agent install` asks for. Zero fields take the defaults of
// DefaultPaths for GOOS.
type Spec struct {
	GOOS string // "linux" or "windows": the system the plan is for
	// Executable is the absolute path of the agent binary the service runs
	// (the caller passes os.Executable with symlinks resolved).
	Executable string
	ConfigFile string // --config
	User       string // --user
	DataDir    string
	// ConfigTemplate is written to ConfigFile when no file exists there
	// (the example config). Install sets its top-level data_dir and its
	// ingest.token_file to the plan's paths, rewriting those lines (or
	// adding them), so the example's Linux values serve Windows too.
	ConfigTemplate []byte
	// Getenv looks up %ProgramData% for the Windows defaults; nil means
	// os.Getenv.
	Getenv func(string) string
	// PackagedUnit is the unit a .deb or .rpm installed (see
	// FindPackagedUnit), or "". Install then writes no unit of its own: it
	// prepares the user, directories, token and config for that unit.
	PackagedUnit string
	// PackagedService: on Windows, the Windows Installer package
	// (packaging/windows/rxedge-agent.wxs) registered the service, its
	// account, start type and Event Log source from its tables. Install
	// then prepares the directories, token and config, and sets what those
	// tables cannot express (recovery actions, service SID type), without
	// registering the service again.
	PackagedService bool
	// Secrets are credential files the config names (the store's NATS
	// .creds or NKey seed file), delivered to the machine beforehand:
	// install keeps their content and sets their permissions as the
	// config's (administrators and the service only), so a file copied in
	// with a folder's inherited permissions is private once installed.
	Secrets []string
}

// Perm is who may use a file or directory: a mode and owner on Linux, a
// protected DACL (no inherited entries) on Windows.
type Perm struct {
	Mode  fs.FileMode
	Owner string
	Group string
	ACL   []ACE
}

// ACE is one Windows access-control entry granting Rights to SID.
type ACE struct {
	SID     string
	Name    string // account name, for the reader
	Rights  string // "F" full, "M" modify, "RX" read and execute, "R" read
	Inherit bool   // applies to files and subdirectories created inside
}

// Dir is a directory install creates when missing and whose Perm it sets.
type Dir struct {
	Purpose string
	Path    string
	Perm    Perm
}

// File is a file install writes only when missing (Content == nil means a
// fresh ingest token) and whose Perm it sets either way.
type File struct {
	Purpose string
	Path    string
	Perm    Perm
	Content []byte
}

// Unit is the systemd unit file install writes.
type Unit struct {
	Path string
	Text string
}

// WindowsService is the service install registers with the service control
// manager, plus what it sets after kardianos has created it.
type WindowsService struct {
	// BinaryPath is the image path exactly as the SCM stores it.
	BinaryPath       string
	Account          string
	AccountSID       string
	StartType        string
	DelayedAutoStart bool
	// Recovery: restart after each delay, in order; the failure count
	// resets after ResetPeriod without a failure.
	Recovery    []time.Duration
	ResetPeriod time.Duration
	EventSource string
}

// Plan is everything install will do, computed without side effects.
type Plan struct {
	GOOS       string
	Paths      Paths
	Executable string
	Args       []string // arguments the service manager passes to Executable
	CreateUser bool     // Linux: create Paths.User when missing
	Dirs       []Dir
	Token      File
	// Secrets are the credential files of Spec.Secrets, with the config's
	// permissions; install never writes them.
	Secrets []File
	Config  File
	// LedgerKey is the store's signing key (package notary), written
	// when missing for the store_id of the config install keeps or writes.
	LedgerKey File
	Unit      *Unit           // Linux
	Windows   *WindowsService // Windows
	// PackagedUnit: the package's unit runs the service; Unit is not
	// written and the service is not registered again.
	PackagedUnit string
	// PackagedService: the MSI registered the service (Windows); see
	// Spec.PackagedService.
	PackagedService bool
	// Check, when set, validates a config file as the agent's run would
	// (settings validation). Install calls it on a new config before
	// putting it in place, and on a kept one, before registering the
	// service; a failure stops the install.
	Check func(configPath string) error `json:"-"`
}

// Prepare validates spec and computes the plan. It reads nothing from the
// machine (except %ProgramData% when spec.Getenv is nil), so any plan can be
// prepared and rendered anywhere.
func Prepare(spec Spec) (*Plan, error) {
	goos := spec.GOOS
	if goos != "linux" && goos != "windows" {
		return nil, fmt.Errorf("installer: prepare for %q: %w", goos, ErrUnsupported)
	}
	getenv := spec.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	def := DefaultPathsEnv(goos, getenv)
	p := &Plan{GOOS: goos, Paths: def}

	var errs []error
	check := func(flag, value, fallback, example string) string {
		if value == "" {
			value = fallback
		}
		v, err := cleanPath(goos, value)
		if err != nil {
			errs = append(errs, fmt.Errorf("installer: %s %q: %w; use a path such as %s", flag, value, err, example))
		}
		return v
	}
	exampleExe := "/usr/local/bin/rxedge-agent"
	if goos == "windows" {
		exampleExe = `C:\Program Files\RxEdge\rxedge-agent.exe`
	}
	if spec.Executable == "" {
		errs = append(errs, fmt.Errorf("installer: executable: path is empty; give the absolute path of the agent binary such as %s", exampleExe))
	} else {
		p.Executable = check("executable", spec.Executable, "", exampleExe)
	}
	p.Paths.ConfigFile = check("--config", spec.ConfigFile, def.ConfigFile, def.ConfigFile)
	p.Paths.DataDir = check("data dir", spec.DataDir, def.DataDir, def.DataDir)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	p.Paths.ConfigDir = dirPath(goos, p.Paths.ConfigFile)
	p.Paths.TokenFile = joinPath(goos, p.Paths.ConfigDir, tokenFileName)
	if strings.EqualFold(p.Paths.ConfigFile, p.Paths.TokenFile) {
		return nil, fmt.Errorf("installer: --config %q: that name is the ingest token's; use %s", p.Paths.ConfigFile, joinPath(goos, p.Paths.ConfigDir, configFileName))
	}

	user, err := checkUser(goos, spec.User, def.User)
	if err != nil {
		return nil, err
	}
	p.Paths.User = user
	p.Args = []string{"run", "--config", p.Paths.ConfigFile}

	if err := checkPlacement(goos, p, def); err != nil {
		return nil, err
	}
	content, err := renderConfig(spec.ConfigTemplate, p.Paths)
	if err != nil {
		return nil, err
	}

	if goos == "windows" {
		prepareWindows(p)
	} else if err := prepareLinux(p); err != nil {
		return nil, err
	}
	if spec.PackagedService {
		if goos != "windows" {
			return nil, fmt.Errorf("installer: a service registered by a Windows Installer package exists on windows only; on %s leave --msi out", goos)
		}
		p.PackagedService = true
	}
	if goos == "linux" && spec.PackagedUnit != "" {
		p.PackagedUnit, p.Unit = spec.PackagedUnit, nil
	}
	p.Config.Content = content
	p.Secrets, err = secretFiles(goos, spec.Secrets, p.Config.Perm)
	return p, err
}

// secretFiles are the credential files at paths, with perm.
func secretFiles(goos string, paths []string, perm Perm) ([]File, error) {
	var out []File
	for _, path := range paths {
		v, err := cleanPath(goos, path)
		if err != nil {
			return nil, fmt.Errorf("installer: credential file %q: %w", path, err)
		}
		out = append(out, File{Purpose: "credential file", Path: v, Perm: perm})
	}
	return out, nil
}

var linuxUserRE = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)

// checkUser validates --user for goos and returns the account to use.
func checkUser(goos, u, fallback string) (string, error) {
	if u == "" {
		return fallback, nil
	}
	if goos == "windows" {
		if _, ok := windowsAccountSID(u); !ok {
			return "", fmt.Errorf(`installer: --user %q: not usable as a service account without a password; use %s (default), LocalSystem, NT AUTHORITY\LocalService or NT AUTHORITY\NetworkService`, u, windowsVirtual)
		}
		return u, nil
	}
	if u == "root" {
		return "", fmt.Errorf("installer: --user root: the agent must not run as root; leave --user out to use the %q system user", linuxUser)
	}
	if !linuxUserRE.MatchString(u) {
		return "", fmt.Errorf("installer: --user %q: not a valid system user name (lower case letters, digits, '_' and '-', at most 32)", u)
	}
	return u, nil
}

// checkPlacement refuses paths the service could not use or that would
// weaken it: directories shared with the rest of the system (install sets
// their permissions), places the systemd sandbox hides from the service,
// and a binary or config the service itself could rewrite.
func checkPlacement(goos string, p *Plan, def Paths) error {
	ps := p.Paths
	var hidden []string
	var shared func(string) bool
	why, exeFix := "the service sandbox hides it (ProtectHome, PrivateTmp)", "copy the binary to /usr/local/bin first"
	if goos == "windows" {
		programData := dirPath(goos, def.ConfigDir)
		hidden = []string{`C:\Users`}
		shared = func(d string) bool {
			return len(d) <= 3 || strings.EqualFold(d, programData) ||
				under(goos, d, `C:\Windows`) || under(goos, d, `C:\Users`) ||
				strings.EqualFold(d, `C:\Program Files`) || strings.EqualFold(d, `C:\Program Files (x86)`)
		}
		why, exeFix = "the service account cannot read user profiles", `copy the binary to C:\Program Files\RxEdge first`
	} else {
		hidden = []string{"/home", "/root", "/run/user", "/tmp", "/var/tmp"}
		shared = func(d string) bool {
			return sharedLinuxDirs[d] || under(goos, d, "/proc") || under(goos, d, "/sys") || under(goos, d, "/dev")
		}
	}
	for _, c := range []struct{ flag, path, fix string }{
		{"executable", p.Executable, exeFix},
		{"--config", ps.ConfigFile, "use " + def.ConfigFile},
		{"data dir", ps.DataDir, "use " + def.DataDir},
	} {
		for _, h := range hidden {
			if under(goos, c.path, h) {
				return fmt.Errorf("installer: %s %q is under %s, where %s; %s", c.flag, c.path, h, why, c.fix)
			}
		}
	}
	if shared(ps.ConfigDir) {
		return fmt.Errorf("installer: --config %q is directly in %s, which other programs share and whose permissions install would change; put the config in a directory of its own such as %s", ps.ConfigFile, ps.ConfigDir, def.ConfigFile)
	}
	if shared(ps.DataDir) {
		return fmt.Errorf("installer: data dir %q is shared with other programs and install would change its permissions; use a directory of its own such as %s", ps.DataDir, def.DataDir)
	}
	if under(goos, ps.ConfigDir, ps.DataDir) {
		return fmt.Errorf("installer: --config %q is inside the data dir %s, which the service can write; keep the config and its token outside it", ps.ConfigFile, ps.DataDir)
	}
	if under(goos, p.Executable, ps.DataDir) {
		return fmt.Errorf("installer: executable %q is inside the data dir %s, which the service can write; install the binary elsewhere", p.Executable, ps.DataDir)
	}
	return nil
}

// sharedLinuxDirs are directories other programs use; install must not
// take over their permissions.
var sharedLinuxDirs = map[string]bool{
	"/": true, "/bin": true, "/boot": true, "/etc": true, "/lib": true, "/media": true, "/mnt": true,
	"/opt": true, "/run": true, "/sbin": true, "/srv": true, "/usr": true, "/usr/bin": true, "/usr/lib": true,
	"/usr/local": true, "/usr/local/bin": true, "/usr/local/etc": true, "/usr/local/lib": true, "/usr/sbin": true,
	"/var": true, "/var/lib": true, "/var/local": true, "/var/log": true,
}

// renderConfig sets data_dir and ingest.token_file in the config template
// to the plan's paths, keeping every other line (and comment) as it is, and
// checks the result by parsing it.
func renderConfig(tmpl []byte, ps Paths) ([]byte, error) {
	if len(bytes.TrimSpace(tmpl)) == 0 {
		return nil, errors.New("installer: config template is empty; pass the example config (configs/agent.example.yaml)")
	}
	t := ParseTemplate(tmpl)
	if err := t.Set(keyTokenFile, ps.TokenFile); err != nil {
		return nil, fmt.Errorf("installer: config template: %w so install can set %s", err, keyTokenFile)
	}
	if err := t.Set(keyDataDir, ps.DataDir); err != nil {
		return nil, fmt.Errorf("installer: config template: %w", err)
	}
	out := t.Bytes()

	c, err := ReadConfig(out)
	if err != nil {
		return nil, fmt.Errorf("installer: config template: %w", err)
	}
	if c.DataDir != ps.DataDir || c.Ingest.TokenFile != ps.TokenFile {
		return nil, fmt.Errorf("installer: config template: %s and %s could not be set (got %q and %q); write them as plain `key: value` lines", keyDataDir, keyTokenFile, c.DataDir, c.Ingest.TokenFile)
	}
	if c.Ingest.Token != "" {
		return nil, fmt.Errorf("installer: config template sets ingest.token; leave it empty, the installed agent reads its token from %s", keyTokenFile)
	}
	return out, nil
}

// ReadConfig reads the settings install and its CLI care about from a YAML
// config.
func ReadConfig(b []byte) (ConfigRefs, error) {
	var c ConfigRefs
	if err := yaml.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("parse yaml: %w", err)
	}
	return c, nil
}

// ConfigRefs is the part of the agent's config install reads.
type ConfigRefs struct {
	StoreID string `yaml:"store_id"`
	DataDir string `yaml:"data_dir"`
	Ingest  struct {
		Listen    string `yaml:"listen"`
		Token     string `yaml:"token"`
		TokenFile string `yaml:"token_file"`
	} `yaml:"ingest"`
	NATS struct {
		Servers []string `yaml:"servers"`
	} `yaml:"nats"`
}

// HasTokenSource reports whether the config names an ingest token, or
// turns the ingest listener off.
func (c ConfigRefs) HasTokenSource() bool {
	return c.Ingest.Listen == "off" || c.Ingest.Token != "" || c.Ingest.TokenFile != ""
}

// ServiceConfig is what Install hands to kardianos/service.
func (p *Plan) ServiceConfig() *service.Config {
	c := &service.Config{
		Name:        p.Paths.ServiceName,
		DisplayName: p.Paths.DisplayName,
		Description: p.Paths.Description,
		UserName:    p.Paths.User,
		Arguments:   append([]string(nil), p.Args...),
		Executable:  p.Executable,
	}
	if p.GOOS == "windows" {
		c.Option = service.KeyValue{
			"StartType":        "automatic",
			"DelayedAutoStart": true,
			// kardianos sets a single recovery action; install widens it to
			// three (see WindowsService.Recovery) right after.
			"OnFailure":              "restart",
			"OnFailureDelayDuration": restartDelay.String(),
			"OnFailureResetPeriod":   int(resetPeriod / time.Second),
		}
		return c
	}
	c.WorkingDirectory = p.Paths.DataDir
	c.Option = service.KeyValue{"SystemdScript": unitTemplate}
	return c
}
