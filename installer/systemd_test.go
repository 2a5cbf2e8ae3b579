package installer

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/kardianos/service"
)

func TestUnitDirectives(t *testing.T) {
	text := mustPrepare(t, linuxSpec()).Unit.Text
	for _, want := range []string{
		"\nExecStart=/usr/local/bin/rxedge-agent \"run\" \"--config\" \"/etc/rxedge/agent.yaml\"\n",
		"\nUser=rxedge\n",
		"\nRestart=on-failure\n",
		"\nRestartSec=5\n",
		"\nTimeoutStopSec=30\n",
		"\nStartLimitIntervalSec=0\n",
		"\nNoNewPrivileges=yes\n",
		"\nProtectSystem=strict\n",
		"\nReadWritePaths=/var/lib/rxedge\n",
		"\nPrivateTmp=yes\n",
		"\nProtectHome=yes\n",
		"\nRestrictAddressFamilies=AF_UNIX AF_INET AF_INET6\n",
		"\nWantedBy=multi-user.target\n",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("unit lacks %q", strings.TrimSpace(want))
		}
	}
	for _, banned := range []string{"RestartSec=120", "{{", "}}", "ConditionFileIsExecutable"} {
		if strings.Contains(text, banned) {
			t.Errorf("unit contains %q", banned)
		}
	}
}

// kardianosKeys are the keys kardianos v1.3.0's (*systemd).Install passes
// to a SystemdScript; a template may use no others.
var kardianosKeys = []string{
	"Arguments", "ChRoot", "Dependencies", "Description", "EnvVars", "LimitNOFILE", "LogDirectory", "Name",
	"OutputFileSupport", "PIDFile", "Path", "ReloadSignal", "Restart", "SuccessExitStatus", "UserName", "WorkingDirectory",
}

func TestUnitTemplateUsesKardianosKeys(t *testing.T) {
	data := unitData(&service.Config{})
	var keys []string
	for k := range data {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, kardianosKeys) {
		t.Errorf("unitData keys: got %v, want %v", keys, kardianosKeys)
	}
	for _, m := range regexp.MustCompile(`\{\{\s*(?:range\s+)?([A-Za-z.]+)`).FindAllStringSubmatch(unitTemplate, -1) {
		if k := m[1]; k != "." && k != "end" && !slices.Contains(kardianosKeys, k) {
			t.Errorf("unitTemplate uses %q, which kardianos does not pass", k)
		}
	}
}

// TestRenderUnit checks the renderer against the behaviour of kardianos's
// engine (its template_test.go and systemd render test) for the constructs
// unitTemplate uses, and that every other construct is refused.
func TestRenderUnit(t *testing.T) {
	cases := []struct {
		name string
		tmpl string
		data map[string]any
		want string
	}{
		{"plain text", "a\nb\n", nil, "a\nb\n"},
		{"value", "x={{Name}}", map[string]any{"Name": "svc"}, "x=svc"},
		{"spaces in action", "{{ Name }}", map[string]any{"Name": "svc"}, "svc"},
		{"cmdEscape", "{{Path | cmdEscape}}", map[string]any{"Path": "/usr/bin/svc app"}, `/usr/bin/svc\x20app`},
		{"cmd", "{{Path | cmd}}", map[string]any{"Path": `a "b"`}, `"a \"b\""`},
		{"pipeline", "{{Path | cmdEscape | cmd}}", map[string]any{"Path": "a b"}, `"a\x20b"`},
		{"range with dot", "{{range Arguments}} {{. | cmd}}{{end}}!", map[string]any{"Arguments": []string{"-a", "with space"}}, ` "-a" "with space"!`},
		{"empty range", "[{{range Arguments}}x{{.}}{{end}}]", map[string]any{"Arguments": []string(nil)}, "[]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := renderUnit(tc.tmpl, tc.data)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	bad := []struct {
		name string
		tmpl string
	}{
		{"if", "{{if Name}}x{{end}}"},
		{"else", "{{else}}"},
		{"trim", "a {{- Name}}"},
		{"unclosed", "{{Name"},
		{"unknown key", "{{Missing}}"},
		{"text/template dot key", "{{.Name}}"},
		{"unknown func", "{{Name | upper}}"},
		{"stray end", "{{end}}"},
		{"unterminated range", "{{range Arguments}}x"},
		{"range over string", "{{range Name}}{{end}}"},
		{"dot outside range", "{{.}}"},
	}
	for _, tc := range bad {
		t.Run("refuses "+tc.name, func(t *testing.T) {
			if got, err := renderUnit(tc.tmpl, map[string]any{"Name": "svc", "Arguments": []string{"a"}}); err == nil {
				t.Errorf("rendered %q, want an error", got)
			}
		})
	}
}

func TestExecStartArgs(t *testing.T) {
	p := mustPrepare(t, linuxSpec())
	got := execStartArgs(p.Unit.Text)
	if !slices.Equal(got, p.Args) {
		t.Errorf("got %q, want %q", got, p.Args)
	}
	if execStartArgs("[Service]\nType=simple\n") != nil {
		t.Error("args from a unit without ExecStart")
	}
}
