package installer

import (
	"slices"
	"strings"
	"testing"
)

func TestSplitCommandLine(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
	}{
		{`"C:\Program Files\RxEdge\rxedge-agent.exe" run --config "C:\ProgramData\RxEdge\agent.yaml"`,
			[]string{`C:\Program Files\RxEdge\rxedge-agent.exe`, "run", "--config", `C:\ProgramData\RxEdge\agent.yaml`}},
		{`C:\Program Files\RxEdge\rxedge-agent.exe run`, []string{`C:\Program`, `Files\RxEdge\rxedge-agent.exe`, "run"}},
		{`C:\RxEdge\a.exe`, []string{`C:\RxEdge\a.exe`}},
		{`a.exe "x y"  z`, []string{"a.exe", "x y", "z"}},
		{`a.exe "C:\dir\\" b`, []string{"a.exe", `C:\dir\`, "b"}},
		{`a.exe a\"b c\\d`, []string{"a.exe", `a"b`, `c\\d`}},
		{`a.exe ""`, []string{"a.exe", ""}},
	} {
		if got := splitCommandLine(tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("splitCommandLine(%s) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

// TestCheckPackagedImage: what `install --msi` accepts as the image path
// the MSI registered. Wine's msiexec writes it unquoted, which must be
// refused: Windows would try C:\Program.exe first.
func TestCheckPackagedImage(t *testing.T) {
	p := mustPrepare(t, windowsSpec())
	for _, tc := range []struct {
		name, image string
		ok          bool
	}{
		{"the MSI's, quoted", `"C:\Program Files\RxEdge\rxedge-agent.exe" run --config "C:\ProgramData\RxEdge\agent.yaml"`, true},
		{"install's own", p.Windows.BinaryPath, true},
		{"other case", `"c:\program files\rxedge\RXEDGE-AGENT.EXE" run --config C:\PROGRAMDATA\RxEdge\agent.yaml`, true},
		{"unquoted path with spaces", `C:\Program Files\RxEdge\rxedge-agent.exe run --config "C:\ProgramData\RxEdge\agent.yaml"`, false},
		{"another binary", `"C:\Program Files\Other\rxedge-agent.exe" run --config "C:\ProgramData\RxEdge\agent.yaml"`, false},
		{"another config", `"C:\Program Files\RxEdge\rxedge-agent.exe" run --config "D:\agent.yaml"`, false},
		{"extra arguments", `"C:\Program Files\RxEdge\rxedge-agent.exe" run --config "C:\ProgramData\RxEdge\agent.yaml" --dev`, false},
		{"empty", ``, false},
	} {
		err := checkPackagedImage(tc.image, p)
		if (err == nil) != tc.ok {
			t.Errorf("%s: checkPackagedImage(%s) = %v, want ok %v", tc.name, tc.image, err, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--msi") {
			t.Errorf("%s: error %q does not name --msi", tc.name, err)
		}
	}
}
