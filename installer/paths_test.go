package installer

import (
	"errors"
	"testing"
)

func TestDefaultPathsEnv(t *testing.T) {
	cases := []struct {
		name     string
		goos     string
		env      map[string]string
		want     Paths
		wantUser string
	}{
		{"linux", "linux", nil, Paths{
			ConfigDir: "/etc/rxedge", ConfigFile: "/etc/rxedge/agent.yaml", TokenFile: "/etc/rxedge/ingest.token", DataDir: "/var/lib/rxedge",
		}, "rxedge"},
		{"windows", "windows", map[string]string{"ProgramData": `C:\ProgramData`}, Paths{
			ConfigDir: `C:\ProgramData\RxEdge`, ConfigFile: `C:\ProgramData\RxEdge\agent.yaml`, TokenFile: `C:\ProgramData\RxEdge\ingest.token`, DataDir: `C:\ProgramData\RxEdge\data`,
		}, `NT SERVICE\rxedge-agent`},
		{"windows other drive, trailing slash", "windows", map[string]string{"ProgramData": `D:\Data\`}, Paths{
			ConfigDir: `D:\Data\RxEdge`, ConfigFile: `D:\Data\RxEdge\agent.yaml`, TokenFile: `D:\Data\RxEdge\ingest.token`, DataDir: `D:\Data\RxEdge\data`,
		}, `NT SERVICE\rxedge-agent`},
		{"windows without ProgramData", "windows", nil, Paths{
			ConfigDir: `C:\ProgramData\RxEdge`, ConfigFile: `C:\ProgramData\RxEdge\agent.yaml`, TokenFile: `C:\ProgramData\RxEdge\ingest.token`, DataDir: `C:\ProgramData\RxEdge\data`,
		}, `NT SERVICE\rxedge-agent`},
		{"windows relative ProgramData ignored", "windows", map[string]string{"ProgramData": `ProgramData`}, Paths{
			ConfigDir: `C:\ProgramData\RxEdge`, ConfigFile: `C:\ProgramData\RxEdge\agent.yaml`, TokenFile: `C:\ProgramData\RxEdge\ingest.token`, DataDir: `C:\ProgramData\RxEdge\data`,
		}, `NT SERVICE\rxedge-agent`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := DefaultPathsEnv(tc.goos, env(tc.env))
			tc.want.ServiceName, tc.want.DisplayName, tc.want.Description, tc.want.User = ServiceName, displayName, description, tc.wantUser
			if got != tc.want {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestCleanPath(t *testing.T) {
	cases := []struct {
		goos, in, want string
		err            error
	}{
		{"linux", "/etc/rxedge/agent.yaml", "/etc/rxedge/agent.yaml", nil},
		{"linux", "", "", errEmptyPath},
		{"linux", "etc/agent.yaml", "", errRelativePath},
		{"linux", "/etc//rxedge", "", errUncleanPath},
		{"linux", "/etc/rxedge/", "", errUncleanPath},
		{"linux", "/opt/rx edge", "", errPathChars},
		{"linux", "/opt/rx%i", "", errPathChars},
		{"linux", "/opt/$HOME", "", errPathChars},
		{"windows", `C:\ProgramData\RxEdge`, `C:\ProgramData\RxEdge`, nil},
		{"windows", `c:/Program Files/RxEdge/`, `c:\Program Files\RxEdge`, nil},
		{"windows", `RxEdge\agent.yaml`, "", errRelativePath},
		{"windows", `\RxEdge\agent.yaml`, "", errRelativePath},
		{"windows", `\\server\share\agent.yaml`, "", errRelativePath},
		{"windows", `C:`, "", errRelativePath},
		{"windows", `C:\`, "", errRootPath},
		{"windows", `C:x\agent.yaml`, "", errRelativePath},
		{"linux", "/", "", errRootPath},
		{"windows", `C:\a\..\b`, "", errUncleanPath},
		{"windows", `C:\a\\b`, "", errUncleanPath},
		{"windows", `C:\a\b.`, "", errUncleanPath},
		{"windows", `C:\a\%TEMP%`, "", errPathChars},
		{"windows", `C:\a\b"c`, "", errPathChars},
		{"windows", `C:\a:b`, "", errPathChars},
	}
	for _, tc := range cases {
		t.Run(tc.goos+" "+tc.in, func(t *testing.T) {
			got, err := cleanPath(tc.goos, tc.in)
			if got != tc.want || !errors.Is(err, tc.err) {
				t.Errorf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestDirAndJoin(t *testing.T) {
	cases := []struct{ goos, path, dir string }{
		{"linux", "/etc/rxedge/agent.yaml", "/etc/rxedge"},
		{"windows", `C:\ProgramData\RxEdge\agent.yaml`, `C:\ProgramData\RxEdge`},
		{"windows", `C:\agent.yaml`, `C:\`},
	}
	for _, tc := range cases {
		if got := dirPath(tc.goos, tc.path); got != tc.dir {
			t.Errorf("dirPath(%s, %q): got %q, want %q", tc.goos, tc.path, got, tc.dir)
		}
	}
	if got := joinPath("windows", `C:\`, "RxEdge", "data"); got != `C:\RxEdge\data` {
		t.Errorf(`joinPath(C:\, RxEdge, data): got %q`, got)
	}
}

// TestCommandName: hints name the binary the user ran, rxedge-agent when
// installed, never a name nobody types.
func TestCommandName(t *testing.T) {
	for arg0, want := range map[string]string{
		"/usr/bin/rxedge-agent":         "rxedge-agent",
		"rxedge-agent.exe":              "rxedge-agent",
		"./agent":                       "agent",
		"/tmp/go-build1/installer.test": "rxedge-agent",
		"":                              "rxedge-agent",
	} {
		if got := commandName(arg0); got != want {
			t.Errorf("commandName(%q) = %q, want %q", arg0, got, want)
		}
	}
}
