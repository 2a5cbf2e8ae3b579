package installer

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// testTemplate stands in for the example config the CLI passes.
const testTemplate = `# RxEdge agent config
store_id: S0042

# Where the agent keeps its data file; data_dir: is rewritten by install.
data_dir: /var/lib/rxedge

ingest:
  listen: 127.0.0.1:8717
  token: ""
  token_file: /etc/rxedge/ingest.token
`

func linuxSpec() Spec {
	return Spec{GOOS: "linux", Executable: "/usr/local/bin/rxedge-agent", ConfigTemplate: []byte(testTemplate)}
}

func windowsSpec() Spec {
	return Spec{
		GOOS:           "windows",
		Executable:     `C:\Program Files\RxEdge\rxedge-agent.exe`,
		ConfigTemplate: []byte(testTemplate),
		Getenv:         env(map[string]string{"ProgramData": `C:\ProgramData`}),
	}
}

func env(m map[string]string) func(string) string {
	return func(k string) string { return m[k] }
}

func mustPrepare(t *testing.T, s Spec) *Plan {
	t.Helper()
	p, err := Prepare(s)
	if err != nil {
		t.Fatalf("Prepare: %v", err)
	}
	return p
}

func TestRenderGolden(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
	}{
		{"linux", linuxSpec()},
		{"windows", windowsSpec()},
		{"windows_msi", func() Spec { s := windowsSpec(); s.PackagedService = true; return s }()},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			if err := mustPrepare(t, tc.spec).Render(&buf); err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", "install_"+tc.name+".golden")
			if *update {
				if err := os.WriteFile(golden, buf.Bytes(), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run `go test ./installer -run TestRenderGolden -update` to create it)", err)
			}
			if got := buf.String(); got != string(want) {
				t.Errorf("dry run differs from %s (rerun with -update after reviewing):\n--- got ---\n%s\n--- want ---\n%s", golden, got, want)
			}
			// Rendering twice gives the same bytes.
			var again bytes.Buffer
			mustPrepare(t, tc.spec).Render(&again)
			if again.String() != buf.String() {
				t.Error("render is not deterministic")
			}
		})
	}
}

// TestPackagedService checks that a plan for a service the MSI registered
// registers nothing but still sets what the MSI's tables cannot express,
// and that only Windows has one.
func TestPackagedService(t *testing.T) {
	s := windowsSpec()
	s.PackagedService = true
	var buf bytes.Buffer
	if err := mustPrepare(t, s).Render(&buf); err != nil {
		t.Fatal(err)
	}
	got := buf.String()
	for _, want := range []string{"the Windows Installer package registered", "Set the recovery actions", "Set the service SID type", `C:\ProgramData\RxEdge\data`} {
		if !strings.Contains(got, want) {
			t.Errorf("MSI plan lacks %q:\n%s", want, got)
		}
	}
	for _, bad := range []string{"Register the service", "Register the Event Log source"} {
		if strings.Contains(got, bad) {
			t.Errorf("MSI plan says %q, but the MSI registers that:\n%s", bad, got)
		}
	}
	l := linuxSpec()
	l.PackagedService = true
	if _, err := Prepare(l); err == nil || !strings.Contains(err.Error(), "--msi") {
		t.Errorf("Prepare(linux, PackagedService) = %v, want an error naming --msi", err)
	}
}

func TestPrepareErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Spec)
		want []string // substrings of the error
	}{
		{"unsupported os", func(s *Spec) { s.GOOS = "darwin" }, []string{`"darwin"`, "linux", "windows"}},
		{"missing executable", func(s *Spec) { s.Executable = "" }, []string{"executable", "/usr/local/bin/rxedge-agent"}},
		{"relative executable", func(s *Spec) { s.Executable = "bin/agent" }, []string{"executable", "not absolute"}},
		{"relative config", func(s *Spec) { s.ConfigFile = "agent.yaml" }, []string{"--config", `"agent.yaml"`, "absolute", "/etc/rxedge/agent.yaml"}},
		{"unclean config", func(s *Spec) { s.ConfigFile = "/etc/rxedge/../agent.yaml" }, []string{"--config", "'..'"}},
		{"space in config", func(s *Spec) { s.ConfigFile = "/etc/rx edge/agent.yaml" }, []string{"--config", "characters"}},
		{"both bad", func(s *Spec) { s.Executable = "agent"; s.ConfigFile = "a.yaml" }, []string{"executable", "--config"}},
		{"config in /etc", func(s *Spec) { s.ConfigFile = "/etc/agent.yaml" }, []string{"--config", "directory of its own"}},
		{"config in home", func(s *Spec) { s.ConfigFile = "/home/ann/rxedge/agent.yaml" }, []string{"--config", "/home", "ProtectHome"}},
		{"executable in tmp", func(s *Spec) { s.Executable = "/tmp/agent" }, []string{"executable", "/tmp", "/usr/local/bin"}},
		{"executable in data dir", func(s *Spec) { s.Executable = "/var/lib/rxedge/agent" }, []string{"executable", "data dir"}},
		{"config in data dir", func(s *Spec) { s.DataDir = "/srv/rxedge"; s.ConfigFile = "/srv/rxedge/conf/agent.yaml" }, []string{"--config", "inside the data dir"}},
		{"data dir shared", func(s *Spec) { s.DataDir = "/var/lib" }, []string{"data dir", "/var/lib/rxedge"}},
		{"config named like the token", func(s *Spec) { s.ConfigFile = "/etc/rxedge/ingest.token" }, []string{"--config", "token", "/etc/rxedge/agent.yaml"}},
		{"root user", func(s *Spec) { s.User = "root" }, []string{"--user root", "must not run as root"}},
		{"bad user", func(s *Spec) { s.User = "Rx Edge" }, []string{"--user", "not a valid"}},
		{"empty template", func(s *Spec) { s.ConfigTemplate = nil }, []string{"config template is empty", "agent.example.yaml"}},
		{"template not yaml", func(s *Spec) {
			s.ConfigTemplate = []byte("data_dir: x\n\tingest: [\n")
		}, []string{"config template", "yaml"}},
		{"template with inline ingest", func(s *Spec) {
			s.ConfigTemplate = []byte("data_dir: x\ningest: {listen: 127.0.0.1:8717}\n")
		}, []string{"inline", "token_file"}},
		{"template with data_dir in a list", func(s *Spec) {
			s.ConfigTemplate = []byte("data_dir:\n  - a\n")
		}, []string{"config template"}},
		{"template with a literal token", func(s *Spec) {
			s.ConfigTemplate = []byte("ingest:\n  token: s3cr3t-s3cr3t-s3cr3t\n")
		}, []string{"ingest.token", "leave it empty"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := linuxSpec()
			tc.edit(&s)
			_, err := Prepare(s)
			if err == nil {
				t.Fatal("Prepare succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestPrepareWindowsErrors(t *testing.T) {
	cases := []struct {
		name string
		edit func(*Spec)
		want []string
	}{
		{"linux path", func(s *Spec) { s.Executable = "/usr/local/bin/rxedge-agent" }, []string{"executable", "not absolute", `C:\Program Files`}},
		{"relative", func(s *Spec) { s.ConfigFile = `RxEdge\agent.yaml` }, []string{"--config", "not absolute"}},
		{"drive relative", func(s *Spec) { s.ConfigFile = `C:agent.yaml` }, []string{"--config", "not absolute"}},
		{"percent", func(s *Spec) { s.Executable = `C:\%TEMP%\agent.exe` }, []string{"executable", "%"}},
		{"user profile", func(s *Spec) { s.Executable = `C:\Users\ann\Downloads\agent.exe` }, []string{"executable", `C:\Users`, `C:\Program Files\RxEdge`}},
		{"config in ProgramData", func(s *Spec) { s.ConfigFile = `C:\ProgramData\agent.yaml` }, []string{"--config", "directory of its own"}},
		{"account with password", func(s *Spec) { s.User = `STORE\alice` }, []string{"--user", `NT SERVICE\rxedge-agent`, "LocalSystem"}},
		{"other virtual account", func(s *Spec) { s.User = `NT SERVICE\other` }, []string{"--user"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := windowsSpec()
			tc.edit(&s)
			_, err := Prepare(s)
			if err == nil {
				t.Fatal("Prepare succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestPrepareCustomPaths(t *testing.T) {
	cases := []struct {
		name       string
		spec       Spec
		wantConfig string
		wantToken  string
		wantData   string
		wantUser   string
	}{
		{"linux defaults", linuxSpec(), "/etc/rxedge/agent.yaml", "/etc/rxedge/ingest.token", "/var/lib/rxedge", "rxedge"},
		{"linux custom", func() Spec {
			s := linuxSpec()
			s.ConfigFile, s.DataDir, s.User = "/srv/rxedge-conf/agent.yaml", "/srv/rxedge-data", "pharmsvc"
			return s
		}(), "/srv/rxedge-conf/agent.yaml", "/srv/rxedge-conf/ingest.token", "/srv/rxedge-data", "pharmsvc"},
		{"windows ProgramData elsewhere", func() Spec {
			s := windowsSpec()
			s.Getenv = env(map[string]string{"ProgramData": `D:\ProgramData`})
			return s
		}(), `D:\ProgramData\RxEdge\agent.yaml`, `D:\ProgramData\RxEdge\ingest.token`, `D:\ProgramData\RxEdge\data`, `NT SERVICE\rxedge-agent`},
		{"windows forward slashes and LocalSystem", func() Spec {
			s := windowsSpec()
			s.ConfigFile, s.User = "C:/RxEdge/agent.yaml", "LocalSystem"
			return s
		}(), `C:\RxEdge\agent.yaml`, `C:\RxEdge\ingest.token`, `C:\ProgramData\RxEdge\data`, "LocalSystem"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPrepare(t, tc.spec)
			got := [4]string{p.Paths.ConfigFile, p.Paths.TokenFile, p.Paths.DataDir, p.Paths.User}
			want := [4]string{tc.wantConfig, tc.wantToken, tc.wantData, tc.wantUser}
			if got != want {
				t.Errorf("paths: got %q, want %q", got, want)
			}
			if a := configArg(p.Args); a != tc.wantConfig {
				t.Errorf("service --config: got %q, want %q", a, tc.wantConfig)
			}
			c, err := ReadConfig(p.Config.Content)
			if err != nil || c.DataDir != tc.wantData || c.Ingest.TokenFile != tc.wantToken {
				t.Errorf("config content refs: got %q, %q, %v; want %q, %q", c.DataDir, c.Ingest.TokenFile, err, tc.wantData, tc.wantToken)
			}
		})
	}
}

// TestWindowsLocalSystemACL: SYSTEM already has full control, so no extra
// entry is added for the account.
func TestWindowsLocalSystemACL(t *testing.T) {
	s := windowsSpec()
	s.User = "LocalSystem"
	p := mustPrepare(t, s)
	want := "D:P(A;OICI;FA;;;S-1-5-18)(A;OICI;FA;;;S-1-5-32-544)"
	if got := p.Dirs[1].Perm.SDDL(); got != want {
		t.Errorf("data dir SDDL: got %s, want %s", got, want)
	}
}

// TestServiceConfigMatchesPlan pins what kardianos receives to what the
// dry run shows.
func TestServiceConfigMatchesPlan(t *testing.T) {
	t.Run("linux", func(t *testing.T) {
		p := mustPrepare(t, linuxSpec())
		c := p.ServiceConfig()
		if c.Option["SystemdScript"] != unitTemplate {
			t.Error("SystemdScript option is not unitTemplate")
		}
		text, err := renderUnit(c.Option["SystemdScript"].(string), unitData(c))
		if err != nil {
			t.Fatal(err)
		}
		if text != p.Unit.Text {
			t.Errorf("unit rendered from the kardianos config differs from the plan's:\n%s\n---\n%s", text, p.Unit.Text)
		}
		if c.Name+".service" != filepath.Base(p.Unit.Path) || c.UserName != "rxedge" || c.Executable != p.Executable {
			t.Errorf("config: got name %q user %q exe %q", c.Name, c.UserName, c.Executable)
		}
	})
	t.Run("windows", func(t *testing.T) {
		p := mustPrepare(t, windowsSpec())
		c := p.ServiceConfig()
		bin := escapeArg(c.Executable)
		for _, a := range c.Arguments {
			bin += " " + escapeArg(a)
		}
		if bin != p.Windows.BinaryPath {
			t.Errorf("image path: got %s, want %s", bin, p.Windows.BinaryPath)
		}
		if c.UserName != p.Windows.Account || c.Option["DelayedAutoStart"] != true || c.Option["StartType"] != "automatic" {
			t.Errorf("config: got user %q options %v", c.UserName, c.Option)
		}
		if c.Option["OnFailureResetPeriod"] != 86400 || c.Option["OnFailureDelayDuration"] != "5s" {
			t.Errorf("recovery options: got %v", c.Option)
		}
	})
}

func TestRenderConfig(t *testing.T) {
	ps := Paths{DataDir: `C:\ProgramData\RxEdge\data`, TokenFile: `C:\ProgramData\RxEdge\ingest.token`}
	const d, k = `data_dir: 'C:\ProgramData\RxEdge\data'`, `token_file: 'C:\ProgramData\RxEdge\ingest.token'`
	cases := []struct {
		name, tmpl, want string
	}{
		{"rewrites both, keeps the rest",
			"# data_dir: in a comment stays\nstore_id: S1\ndata_dir: /var/lib/rxedge # old\ningest:\n  # token_file: also a comment\n  listen: 127.0.0.1:8717\n  token_file: /etc/rxedge/ingest.token\nlog:\n  level: info\n",
			"# data_dir: in a comment stays\nstore_id: S1\n" + d + "\ningest:\n  # token_file: also a comment\n  listen: 127.0.0.1:8717\n  " + k + "\nlog:\n  level: info\n"},
		{"adds token_file to ingest",
			"ingest:\n    listen: 127.0.0.1:8717\ndata_dir: x\n",
			"ingest:\n    " + k + "\n    listen: 127.0.0.1:8717\n" + d + "\n"},
		{"adds both",
			"store_id: S1\n",
			"store_id: S1\ningest:\n  " + k + "\n" + d + "\n"},
		{"token_file of another section untouched",
			"tls:\n  token_file: /x\ningest:\n  token_file: /y\ndata_dir: z\n",
			"tls:\n  token_file: /x\ningest:\n  " + k + "\n" + d + "\n"},
		{"quote in a path",
			"data_dir: x\n", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ps := ps
			if tc.want == "" {
				ps.DataDir = `C:\It's\data`
				got, err := renderConfig([]byte(tc.tmpl), ps)
				if c, _ := ReadConfig(got); err != nil || c.DataDir != ps.DataDir {
					t.Errorf("got %q (%v), want data_dir %q", got, err, ps.DataDir)
				}
				return
			}
			got, err := renderConfig([]byte(tc.tmpl), ps)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestExampleConfig prepares both plans with the repository's example
// config, which is what the CLI installs.
func TestExampleConfig(t *testing.T) {
	example, err := os.ReadFile(filepath.Join("..", "configs", "agent.example.yaml"))
	if err != nil {
		t.Skipf("no example config: %v", err)
	}
	for _, spec := range []Spec{linuxSpec(), windowsSpec()} {
		t.Run(spec.GOOS, func(t *testing.T) {
			spec.ConfigTemplate = example
			p := mustPrepare(t, spec)
			c, err := ReadConfig(p.Config.Content)
			if err != nil || c.DataDir != p.Paths.DataDir || c.Ingest.TokenFile != p.Paths.TokenFile {
				t.Errorf("installed config sets %q, %q (%v); want %q, %q", c.DataDir, c.Ingest.TokenFile, err, p.Paths.DataDir, p.Paths.TokenFile)
			}
			if strings.Count(string(p.Config.Content), "\n") != strings.Count(string(example), "\n") {
				t.Error("lines were added to or lost from the example")
			}
		})
	}
}
