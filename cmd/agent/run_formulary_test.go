//go:build unix

package main

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/internal/cli"
)

// TestRunFormularyFlag runs the built agent with --formulary: the flag
// wins over RXEDGE_INTAKE_FORMULARY (which names a file that does not
// exist) and its units are enforced at the ingest listener; a drop folder
// without a formulary is a usage error naming the flags; a --formulary
// that cannot be read stops the start, naming the file.
func TestRunFormularyFlag(t *testing.T) {
	bin := buildAgent(t)
	dir := t.TempDir()
	cfg := agentConfig(t, filepath.Join(dir, "data"))
	drop := filepath.Join(dir, "asap")
	if err := os.Mkdir(drop, 0o700); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "no-such-formulary.csv")
	form := filepath.Join(dir, "formulary.csv")
	if err := os.WriteFile(form, []byte("ndc,schedule,unit\n00591-0540-01,CII,EA\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	os.Unsetenv("RXEDGE_INTAKE_FORMULARY")
	runOnce := func(args ...string) (int, string) {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, append([]string{"run", "--config", cfg, "--ingest", "off"}, args...)...)
		var errb bytes.Buffer
		cmd.Stderr = &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err == nil {
			t.Fatalf("agent run %v started and stopped with exit 0; want a refusal to start\n%s", args, errb.String())
		}
		if !errors.As(err, &ee) {
			t.Fatalf("agent run %v: %v", args, err)
		}
		return ee.ExitCode(), errb.String()
	}

	code, errs := runOnce("--asap-dir", drop)
	if code != cli.ExitUsage || !strings.Contains(errs, "--asap-dir needs --formulary FILE") || !strings.Contains(errs, "RXEDGE_INTAKE_FORMULARY") {
		t.Errorf("--asap-dir without a formulary: exit %d, %q; want %d naming --formulary", code, errs, cli.ExitUsage)
	}
	code, errs = runOnce("--asap-dir", drop, "--formulary", missing)
	if code != cli.ExitError || !strings.Contains(errs, "--formulary") || !strings.Contains(errs, missing) {
		t.Errorf("--formulary naming no file: exit %d, %q; want %d naming the flag and %s", code, errs, cli.ExitError, missing)
	}

	t.Setenv("RXEDGE_INTAKE_FORMULARY", missing)
	c := startChild(t, bin, "--config", cfg, "--ingest", "127.0.0.1:0", "--asap-dir", drop, "--formulary", form)
	for _, tc := range []struct {
		unit string
		want int
	}{{"ML", http.StatusUnprocessableEntity}, {"EA", http.StatusAccepted}} {
		body := `{"movement_id":"RCV-` + tc.unit + `","type":"receive","ndc":"00591054001","quantity":100,"unit":"` + tc.unit + `","occurred_at":"2026-01-05T10:00:00Z","schedule":"CII","dea_form_222":"123456789"}`
		resp, err := http.Post("http://"+c.ingest+"/v1/movements", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		var answer bytes.Buffer
		answer.ReadFrom(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("a receipt in %s: HTTP %d %s, want %d (the formulary's unit is EA)", tc.unit, resp.StatusCode, answer.String(), tc.want)
		}
	}
}
