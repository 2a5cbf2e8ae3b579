package installer

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// fakeHost records what install asks of the OS and does it to nothing.
type fakeHost struct {
	preflightErr error
	registerErr  error
	userCreated  bool
	perms        map[string]Perm
	registered   int
}

func (h *fakeHost) preflight(*Plan) error { return h.preflightErr }
func (h *fakeHost) ensureUser(context.Context, *Plan) (bool, error) {
	return h.userCreated, nil
}
func (h *fakeHost) applyPerm(path string, pm Perm) error {
	if h.perms == nil {
		h.perms = map[string]Perm{}
	}
	h.perms[path] = pm
	return nil
}
func (h *fakeHost) register(context.Context, *Plan) error {
	h.registered++
	return h.registerErr
}

// tempPlan prepares the Linux plan and moves its files under a temporary
// root, so the file steps run for real.
func tempPlan(t *testing.T) (*Plan, string) {
	t.Helper()
	p := mustPrepare(t, linuxSpec())
	root := t.TempDir()
	move := func(s *string) { *s = filepath.Join(root, *s) }
	for i := range p.Dirs {
		move(&p.Dirs[i].Path)
	}
	move(&p.Token.Path)
	move(&p.Config.Path)
	move(&p.Paths.ConfigFile)
	move(&p.Paths.TokenFile)
	move(&p.Paths.DataDir)
	// The config must name the moved paths for the existing-config check.
	p.Config.Content = []byte("data_dir: " + p.Paths.DataDir + "\ningest:\n  token_file: " + p.Paths.TokenFile + "\n")
	return p, root
}

func TestInstallWritesOnceAndKeeps(t *testing.T) {
	p, _ := tempPlan(t)
	h := &fakeHost{userCreated: true}
	var out bytes.Buffer
	if err := install(context.Background(), p, &out, h); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	token, err := os.ReadFile(p.Token.Path)
	if err != nil {
		t.Fatal(err)
	}
	if b, err := hex.DecodeString(string(token)); err != nil || len(b) != 32 {
		t.Errorf("token %q: want 32 bytes in hex (%v)", token, err)
	}
	if got, _ := os.ReadFile(p.Config.Path); string(got) != string(p.Config.Content) {
		t.Errorf("config: got %q, want %q", got, p.Config.Content)
	}
	for _, d := range p.Dirs {
		if fi, err := os.Stat(d.Path); err != nil || !fi.IsDir() {
			t.Errorf("directory %s not created: %v", d.Path, err)
		}
	}
	for _, path := range []string{p.Dirs[0].Path, p.Dirs[1].Path, p.Token.Path, p.Config.Path} {
		if _, ok := h.perms[path]; !ok {
			t.Errorf("permissions of %s not set", path)
		}
	}
	if h.perms[p.Token.Path].Mode != 0o640 || h.perms[p.Token.Path].Owner != "root" || h.perms[p.Token.Path].Group != "rxedge" {
		t.Errorf("token perm: got %+v", h.perms[p.Token.Path])
	}
	if h.registered != 1 {
		t.Errorf("register called %d times, want 1", h.registered)
	}
	for _, want := range []string{"created system user rxedge", "wrote ingest token", "wrote config", "installed rxedge-agent"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}

	// A second install (after an uninstall) keeps token and config.
	os.WriteFile(p.Config.Path, []byte("data_dir: /elsewhere\n"), 0o640)
	out.Reset()
	if err := install(context.Background(), p, &out, &fakeHost{}); err != nil {
		t.Fatal(err)
	}
	if again, _ := os.ReadFile(p.Token.Path); string(again) != string(token) {
		t.Error("second install replaced the token")
	}
	if got, _ := os.ReadFile(p.Config.Path); string(got) != "data_dir: /elsewhere\n" {
		t.Errorf("second install replaced the config: %q", got)
	}
	for _, want := range []string{"kept existing ingest token", "kept existing config", "warning:", "ingest.token_file", "data_dir"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("second output lacks %q:\n%s", want, out.String())
		}
	}
	entries, _ := os.ReadDir(filepath.Dir(p.Token.Path))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".") {
			t.Errorf("temporary file %s left behind", e.Name())
		}
	}
}

func TestInstallStopsAtFailures(t *testing.T) {
	cases := []struct {
		name    string
		host    *fakeHost
		wantErr error
		written bool
	}{
		{"preflight", &fakeHost{preflightErr: ErrNotAdmin}, ErrNotAdmin, false},
		{"register", &fakeHost{registerErr: ErrInstalled}, ErrInstalled, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, _ := tempPlan(t)
			err := install(context.Background(), p, new(bytes.Buffer), tc.host)
			if !errors.Is(err, tc.wantErr) {
				t.Errorf("got %v, want %v", err, tc.wantErr)
			}
			if _, err := os.Stat(p.Token.Path); (err == nil) != tc.written {
				t.Errorf("token written: got %v, want %v", err == nil, tc.written)
			}
		})
	}
}

func TestInstallRefusesSymlinks(t *testing.T) {
	p, root := tempPlan(t)
	target := filepath.Join(root, "shadow")
	os.WriteFile(target, []byte("secret"), 0o600)
	os.MkdirAll(filepath.Dir(p.Config.Path), 0o750)
	if err := os.Symlink(target, p.Config.Path); err != nil {
		t.Skip(err)
	}
	h := &fakeHost{}
	err := install(context.Background(), p, new(bytes.Buffer), h)
	if err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("got %v, want a refusal naming the symbolic link", err)
	}
	if _, ok := h.perms[p.Config.Path]; ok {
		t.Error("permissions applied through the symlink")
	}
	if h.registered != 0 {
		t.Error("service registered after the refusal")
	}
}

func TestWriteNewConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ingest.token")
	var wg sync.WaitGroup
	created := make(chan string, 8)
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			content := strings.Repeat(string(rune('a'+i)), 64)
			ok, err := writeNew(path, []byte(content), nil)
			if err != nil {
				t.Error(err)
			}
			if ok {
				created <- content
			}
		}()
	}
	wg.Wait()
	close(created)
	var winners []string
	for c := range created {
		winners = append(winners, c)
	}
	if len(winners) != 1 {
		t.Fatalf("%d writers created the file, want exactly 1", len(winners))
	}
	if got, _ := os.ReadFile(path); string(got) != winners[0] {
		t.Errorf("file holds %q, want the winner's %q", got, winners[0])
	}
	entries, _ := os.ReadDir(filepath.Dir(path))
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file", len(entries))
	}
}

func TestCheckExistingConfig(t *testing.T) {
	ps := Paths{DataDir: "/var/lib/rxedge", TokenFile: "/etc/rxedge/ingest.token"}
	cases := []struct {
		name   string
		config string
		want   []string // substrings, one per expected warning
	}{
		{"matches", "data_dir: /var/lib/rxedge\ningest:\n  token_file: /etc/rxedge/ingest.token\n", nil},
		{"no token", "data_dir: /var/lib/rxedge\n", []string{"ingest.token_file"}},
		{"other data dir", "data_dir: /data\ningest:\n  token_file: /etc/rxedge/ingest.token\n", []string{"may write only /var/lib/rxedge"}},
		{"not yaml", "data_dir: [\n", []string{"parse yaml"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "agent.yaml")
			os.WriteFile(path, []byte(tc.config), 0o600)
			got := checkExistingConfig(path, ps)
			if len(got) != len(tc.want) {
				t.Fatalf("got warnings %q, want %d", got, len(tc.want))
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("warning %q lacks %q", got[i], w)
				}
			}
		})
	}
}

// TestApplyPermLinux runs the real chown/chmod with the current user, so it
// needs no root.
func TestApplyPermLinux(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux permissions")
	}
	u, err := user.Current()
	if err != nil {
		t.Skip(err)
	}
	g, err := user.LookupGroupId(u.Gid)
	if err != nil {
		t.Skip(err)
	}
	path := filepath.Join(t.TempDir(), "f")
	os.WriteFile(path, nil, 0o600)
	if err := (osHost{}).applyPerm(path, Perm{Mode: 0o640, Owner: u.Username, Group: g.Name}); err != nil {
		t.Fatal(err)
	}
	fi, _ := os.Stat(path)
	if fi.Mode().Perm() != 0o640 {
		t.Errorf("mode: got %o, want 640", fi.Mode().Perm())
	}
	if err := (osHost{}).applyPerm(path, Perm{Mode: 0o640, Owner: "no-such-user-rxedge", Group: g.Name}); err == nil {
		t.Error("unknown owner accepted")
	}
}

func TestConfigArg(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"run", "--config", "/etc/rxedge/agent.yaml"}, "/etc/rxedge/agent.yaml"},
		{[]string{"run", "--config=/srv/a.yaml"}, "/srv/a.yaml"},
		{[]string{"run"}, ""},
		{[]string{"run", "--config"}, ""},
	}
	for _, tc := range cases {
		if got := configArg(tc.args); got != tc.want {
			t.Errorf("configArg(%q): got %q, want %q", tc.args, got, tc.want)
		}
	}
}

func TestStatusNeedsNoService(t *testing.T) {
	// On a machine without systemd Status must say so, not panic or claim
	// a state.
	st, err := Status(ServiceName)
	if err != nil && st != StateUnknown {
		t.Errorf("got state %q with error %v; an error must come with %q", st, err, StateUnknown)
	}
}

// TestInstallChecksTheConfigBeforeRegistering: a config the agent would
// refuse is never put in place, a kept one that it would refuse stops the
// install, and in both cases the service is not registered.
func TestInstallChecksTheConfigBeforeRegistering(t *testing.T) {
	invalid := errors.New("store_id: is required")
	for _, kept := range []bool{false, true} {
		t.Run(fmt.Sprint("kept=", kept), func(t *testing.T) {
			p, _ := tempPlan(t)
			if kept {
				if err := os.MkdirAll(filepath.Dir(p.Config.Path), 0o750); err != nil {
					t.Fatal(err)
				}
				os.WriteFile(p.Config.Path, p.Config.Content, 0o640)
			}
			var checked string
			p.Check = func(path string) error { checked = path; return invalid }
			h := &fakeHost{}
			err := install(context.Background(), p, new(bytes.Buffer), h)
			if !errors.Is(err, invalid) || h.registered != 0 {
				t.Errorf("got %v and %d registrations, want the check's error and none", err, h.registered)
			}
			if checked == "" {
				t.Error("the config was not checked")
			}
			if _, err := os.Stat(p.Config.Path); (err == nil) != kept {
				t.Errorf("config present: %v, want %v", err == nil, kept)
			}
		})
	}
}

// TestInstallProtectsTheCredentialFiles: a credential file delivered
// before the install (an SCCM package's C:\secure\S0107.creds) keeps its
// content and gets the config's permissions: administrators and the
// service only, on Windows as on Linux. One that is missing, or a link,
// stops the install before the service is registered.
func TestInstallProtectsTheCredentialFiles(t *testing.T) {
	for _, spec := range []Spec{linuxSpec(), windowsSpec()} {
		spec.Secrets = []string{map[string]string{"linux": "/etc/rxedge/S0107.creds", "windows": `C:\secure\S0107.creds`}[spec.GOOS]}
		p := mustPrepare(t, spec)
		if len(p.Secrets) != 1 || !reflect.DeepEqual(p.Secrets[0].Perm, p.Config.Perm) {
			t.Errorf("%s: secrets %+v, want one with the config's permissions %+v", spec.GOOS, p.Secrets, p.Config.Perm)
		}
		var b bytes.Buffer
		if err := p.Render(&b); err != nil || !strings.Contains(b.String(), "credential file "+spec.Secrets[0]) {
			t.Errorf("%s: the dry run does not show the credential file (%v):\n%s", spec.GOOS, err, b.String())
		}
	}

	p, root := tempPlan(t)
	creds := filepath.Join(root, "S0107.creds")
	os.WriteFile(creds, []byte("-----BEGIN NATS USER JWT-----\n"), 0o644)
	p.Secrets = []File{{Purpose: "credential file", Path: creds, Perm: p.Config.Perm}}
	h := &fakeHost{}
	var out bytes.Buffer
	if err := install(context.Background(), p, &out, h); err != nil {
		t.Fatalf("install: %v\n%s", err, out.String())
	}
	if got, ok := h.perms[creds]; !ok || !reflect.DeepEqual(got, p.Config.Perm) {
		t.Errorf("the credential file's permissions: %+v (set %v), want the config's %+v", got, ok, p.Config.Perm)
	}
	if b, _ := os.ReadFile(creds); string(b) != "-----BEGIN NATS USER JWT-----\n" {
		t.Errorf("install changed the credential file: %q", b)
	}

	os.Remove(creds)
	os.Symlink(p.Config.Path, creds)
	linked := &fakeHost{}
	if err := install(context.Background(), p, &out, linked); err == nil || linked.registered != 0 {
		t.Errorf("a link: install %v, registered %d times; want a refusal before registering", err, linked.registered)
	}
	os.Remove(creds)
	missing := &fakeHost{}
	if err := install(context.Background(), p, &out, missing); err == nil || !strings.Contains(err.Error(), "copy it onto this machine") || missing.registered != 0 {
		t.Errorf("a missing credential file: %v, registered %d times", err, missing.registered)
	}
}
