package installer

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestPackageUnitFile: the unit the packages ship is the unit install
// writes, plus the condition on the config; regenerate it with -update.
func TestPackageUnitFile(t *testing.T) {
	want, err := PackageUnit()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join("..", "packaging", "rxedge-agent.service")
	if *update {
		if err := os.WriteFile(path, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run `go test ./installer -run TestPackageUnitFile -update`)", err)
	}
	if string(got) != want {
		t.Errorf("%s differs from PackageUnit (rerun with -update after reviewing):\n--- got ---\n%s\n--- want ---\n%s", path, got, want)
	}
	if !strings.Contains(want, "ExecStart=/usr/bin/rxedge-agent \"run\" \"--config\" \"/etc/rxedge/agent.yaml\"\n") || !strings.Contains(want, "ConditionPathExists=/etc/rxedge/agent.yaml\n") {
		t.Errorf("package unit does not run /usr/bin/rxedge-agent on the default config:\n%s", want)
	}
}

// TestPackagedPlanWritesNoUnit: with a package's unit, install prepares the
// files and leaves the service to the package, and its dry run says so.
func TestPackagedPlanWritesNoUnit(t *testing.T) {
	p, err := Prepare(Spec{GOOS: "linux", Executable: PackageExecutable, ConfigTemplate: []byte("store_id: S0107\n"), PackagedUnit: "/usr/lib/systemd/system/rxedge-agent.service"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Unit != nil || p.PackagedUnit == "" {
		t.Fatalf("unit %v, packaged %q; want no unit of its own", p.Unit, p.PackagedUnit)
	}
	var b strings.Builder
	if err := p.Render(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "installed by the package") || strings.Contains(b.String(), "systemctl enable") {
		t.Errorf("dry run:\n%s", b.String())
	}
}
