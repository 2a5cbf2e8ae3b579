package settings

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/sync"
)

func TestExampleConfigLoadsAndDocumentsEverySetting(t *testing.T) {
	path := filepath.Join("..", "configs", "agent.example.yaml")
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(path)
	text := string(raw)
	for _, p := range Paths() {
		leaf := p[strings.LastIndex(p, ".")+1:]
		if !strings.Contains(text, leaf+":") {
			t.Errorf("setting %s is not in %s", p, path)
		}
	}
	if c.Remote.Operators == nil || len(c.Control.Operators) != 0 {
		t.Errorf("example does not use the section remote:")
	}
	// The example names a token file that does not exist here.
	c.Ingest.TokenFile = ""
	o, err := c.Validate()
	if err != nil {
		t.Fatalf("example does not validate: %v", err)
	}
	if o.StoreID != "S0042" || o.Controlled.MaxAttempts != 7 || o.Ordinary.MaxAttempts != 5 || o.MaxInFlight != 256 {
		t.Fatalf("options = %+v", o)
	}
	if o.SyncedHorizon <= central.DefaultHorizon {
		t.Errorf("example keeps synced keys %v, not longer than central's horizon %v", o.SyncedHorizon, central.DefaultHorizon)
	}
}

// An agent must remember a synced key longer than central refuses it:
// a resubmission it has forgotten is then one central has forgotten too,
// archived again under its new sequence, never refused by central under a
// sequence the archive lacks (DESIGN §5).
func TestSyncedKeysOutliveTheHorizon(t *testing.T) {
	var c Config
	c.StoreID, c.DataDir = "S1", t.TempDir()
	o, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if o.SyncedHorizon <= central.DefaultHorizon {
		t.Errorf("synced keys are kept %v, not longer than central's horizon %v", o.SyncedHorizon, central.DefaultHorizon)
	}
}

func TestDefaults(t *testing.T) {
	var c Config
	c.StoreID, c.DataDir = "S1", t.TempDir()
	o, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if o.IngestListen != DefaultIngestListen || o.MaxRequestBytes != 4<<20 || o.MaxMovementBytes != 64<<10 ||
		o.AttemptTimeout != 5*time.Second || o.BatchSize != 1000 || o.SyncedHorizon != 40*24*time.Hour ||
		o.JournalRetention != 730*24*time.Hour || o.Controlled.MaxDelay != 30*time.Second || o.LogLevel != "info" {
		t.Fatalf("defaults = %+v", o)
	}
}

func TestValidateReportsEveryProblemByField(t *testing.T) {
	var c Config
	c.StoreID = "S 42"
	c.Ingest.Listen = "0.0.0.0:8717"
	c.Ingest.Token = "short"
	c.NATS.Servers = []string{"http://x", "nats://user:secret@host:4222"}
	c.NATS.User = "u"
	c.NATS.CredsFile = "/nonexistent/agent.creds"
	c.Sync.MaxInFlight = -1
	c.Sync.BatchSize = 5000
	c.Retry.Controlled.MaxAttempts = -2
	c.Control.OperatorKeys = []string{"not-a-key"}
	c.Ingest.AllowedHosts = []string{"pos:8717"}
	c.Ingest.AllowedOrigins = []string{"pos.example"}
	c.Log.Level = "loud"
	_, err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	msg := err.Error()
	for _, field := range []string{"store_id:", "data_dir:", "ingest.token:", "nats.servers:", "nats:", "nats.user:",
		"nats.creds_file:", "sync.max_in_flight:", "sync.batch_size:", "retry.controlled.max_attempts", "control.operator_keys:", "ingest.allowed_hosts:", "ingest.allowed_origins:", "log.level:"} {
		if !strings.Contains(msg, field) {
			t.Errorf("error does not name %s:\n%s", field, msg)
		}
	}
	if strings.Contains(msg, "secret") {
		t.Errorf("error echoes a password:\n%s", msg)
	}
	c = Config{StoreID: "fleet", DataDir: t.TempDir()}
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("store id fleet: %v", err)
	}
	// Listening beyond loopback needs a token; with one it is allowed.
	c = Config{StoreID: "S1", DataDir: t.TempDir()}
	c.Ingest.Listen = "0.0.0.0:8717"
	if _, err := c.Validate(); err == nil || !strings.Contains(err.Error(), "ingest.listen") {
		t.Errorf("non-loopback listen without a token: %v", err)
	}
	c.Ingest.Token = strings.Repeat("t", 32)
	if _, err := c.Validate(); err != nil {
		t.Errorf("non-loopback listen with a token: %v", err)
	}
}

func TestEnvironmentOverridesFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	os.WriteFile(path, []byte("store_id: S1\ndata_dir: /x\nnats:\n  servers: [nats://a:4222]\nretry:\n  controlled:\n    max_attempts: 9\n"), 0o600)
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"RXEDGE_STORE_ID":                     "S2",
		"RXEDGE_NATS_SERVERS":                 "nats://b:4222, nats://c:4222",
		"RXEDGE_SYNC_RESUME_JITTER":           "5s",
		"RXEDGE_RETRY_ORDINARY_MAX_ATTEMPTS":  "3",
		"RXEDGE_INGEST_MAX_REQUEST_BYTES":     "1000000",
		"RXEDGE_RETRY_CONTROLLED_MAX_ATTEMPT": "ignored: no such setting",
	}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	if c.StoreID != "S2" || strings.Join(c.NATS.Servers, " ") != "nats://b:4222 nats://c:4222" || c.Sync.ResumeJitter != 5*time.Second ||
		c.Retry.Ordinary.MaxAttempts != 3 || c.Retry.Controlled.MaxAttempts != 9 || c.Ingest.MaxRequestBytes != 1000000 || c.DataDir != "/x" {
		t.Fatalf("after env: %+v", c)
	}
	bad := map[string]string{"RXEDGE_SYNC_RESUME_JITTER": "soon", "RXEDGE_SYNC_MAX_IN_FLIGHT": "many"}
	err = c.ApplyEnv(func(k string) (string, bool) { v, ok := bad[k]; return v, ok })
	if err == nil || !strings.Contains(err.Error(), "RXEDGE_SYNC_RESUME_JITTER") || !strings.Contains(err.Error(), "RXEDGE_SYNC_MAX_IN_FLIGHT") {
		t.Fatalf("bad env values: %v", err)
	}
}

func TestLoadFileIsStrict(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	os.WriteFile(path, []byte("store_id: S1\nstoreid: typo\nsync:\n  max_in_flight: lots\n"), 0o600)
	_, err := LoadFile(path)
	if err == nil || !strings.Contains(err.Error(), "storeid") || !strings.Contains(err.Error(), "line 4") {
		t.Fatalf("strict load: %v", err)
	}
	os.WriteFile(path, nil, 0o600)
	if _, err := LoadFile(path); err != nil {
		t.Fatalf("empty file: %v", err)
	}
}

// TestLoadFileReportsEveryMistake: unknown keys with a suggestion, values
// of the wrong type with their field, each with its line, all at once,
// and no secret echoed. The golden file is the whole message.
func TestLoadFileReportsEveryMistake(t *testing.T) {
	path := filepath.Join("testdata", "mistakes.yaml")
	_, err := LoadFile(path)
	if err == nil {
		t.Fatal("accepted")
	}
	golden := filepath.Join("testdata", "mistakes.golden")
	if os.Getenv("UPDATE_GOLDEN") != "" {
		os.WriteFile(golden, []byte(err.Error()+"\n"), 0o644)
	}
	want, rerr := os.ReadFile(golden)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if got := err.Error() + "\n"; got != string(want) {
		t.Errorf("got:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(err.Error(), "hunter2") {
		t.Error("the error echoes a password")
	}
}

func TestMetricsListen(t *testing.T) {
	for _, tt := range []struct {
		listen, token string
		ok            bool
	}{
		{"", "", true}, {"off", "", true}, {"127.0.0.1:9717", "", true}, {"localhost:9717", "", true},
		{"0.0.0.0:9717", "", false}, {"0.0.0.0:9717", strings.Repeat("t", 16), true}, {"9717", "", false}, {"127.0.0.1:port", "", false},
	} {
		c := Config{StoreID: "S1", DataDir: t.TempDir()}
		c.Metrics.Listen, c.Metrics.Token = tt.listen, tt.token
		o, err := c.Validate()
		if (err == nil) != tt.ok {
			t.Errorf("metrics.listen %q token %q: got %v, want ok %v", tt.listen, tt.token, err, tt.ok)
		}
		if err == nil && (tt.listen == "off" || tt.listen == "") && o.MetricsListen != "" {
			t.Errorf("metrics.listen %q: listens on %q", tt.listen, o.MetricsListen)
		}
	}
}

func TestOperators(t *testing.T) {
	const k1 = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	const k2 = "UAHJLSMYZDYHYKYV2HLRYXMGAKWNUKX4ZPTZCH4O3WKXIS3UZ2VSYXSP"
	c := Config{StoreID: "S1", DataDir: t.TempDir()}
	c.Control.OperatorKeys = []string{k1}
	c.Control.Operators = map[string]string{"alice": k1, "bob": k2}
	o, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(o.OperatorKeys, ",") != k1+","+k2 || o.OperatorNames[k1] != "alice" || o.OperatorNames[k2] != "bob" {
		t.Errorf("keys %v, names %v", o.OperatorKeys, o.OperatorNames)
	}
	c.Control.Operators = map[string]string{"carol": "not-a-key", "a b": k2, "dave": k1, "erin": k1}
	_, err = c.Validate()
	for _, want := range []string{"control.operators.carol:", `control.operators: "a b" is not a name`, "one name per key"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v lacks %q", err, want)
		}
	}
	env := map[string]string{"RXEDGE_CONTROL_OPERATORS": "alice=" + k1 + ", bob=" + k2}
	c = Config{}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil || c.Control.Operators["bob"] != k2 {
		t.Errorf("RXEDGE_CONTROL_OPERATORS: %v %v", err, c.Control.Operators)
	}
}

func TestSyncOptionsCarryTheSettings(t *testing.T) {
	var c Config
	c.StoreID, c.DataDir = "S1", t.TempDir()
	c.NATS.Servers = []string{"nats://central:4222"}
	c.Sync.BatchSize = 200
	o, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	so := o.Sync()
	if so.StoreID != "S1" || so.BatchSize != 200 || so.MaxInFlight != sync.DefaultMaxInFlight ||
		so.AttemptTimeout != sync.DefaultAttemptTimeout || so.NATS.Servers[0] != "nats://central:4222" ||
		so.NATS.ReconnectJitter != sync.DefaultReconnectJitter || so.Controlled != o.Controlled {
		t.Fatalf("sync options = %+v", so)
	}
}

// A server URL that does not parse is named in the error by its place in
// the list: nothing in it can be told from a password.
func TestBadServerURLHidesCredentials(t *testing.T) {
	c := Config{StoreID: "S1", DataDir: t.TempDir()}
	c.NATS.Servers = []string{"nats://u:hunter2@[bad", "tls://hunter3@h:port", "nats://u:hunter4/x@h:4222", "nats://u:hunter5"}
	_, err := c.Validate()
	if err == nil {
		t.Fatal("accepted")
	}
	for _, secret := range []string{"hunter2", "hunter3", "hunter4", "hunter5"} {
		if strings.Contains(err.Error(), secret) {
			t.Errorf("error echoes %s:\n%v", secret, err)
		}
	}
	if !strings.Contains(err.Error(), `nats.servers: server 1 of 4 (not shown: it may hold a password) is not a server URL`) {
		t.Errorf("error does not name the server:\n%v", err)
	}
}

// The section remote: was named control:. The former name still works,
// with a warning naming the new one; both at once is a problem.
func TestRemoteSectionAndItsFormerName(t *testing.T) {
	const k1 = "UDXU4RCSJNZOIQHZNWXHXORDPRTGNJAHAHFRGZNEEJCPQTT2M7NLCNF4"
	dir := t.TempDir()
	load := func(t *testing.T, yaml string, env map[string]string) (Options, error) {
		t.Helper()
		path := filepath.Join(dir, "agent.yaml")
		if err := os.WriteFile(path, []byte("store_id: S1\ndata_dir: "+dir+"\n"+yaml), 0o600); err != nil {
			t.Fatal(err)
		}
		c, err := LoadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
			t.Fatal(err)
		}
		return c.Validate()
	}
	for _, tt := range []struct {
		name    string
		yaml    string
		env     map[string]string
		warning bool
		problem string
	}{
		{name: "remote", yaml: "remote:\n  operators: {alice: " + k1 + "}\n  allow_unsigned_reads: true\n"},
		{name: "remote from the environment", yaml: "remote:\n  allow_unsigned_reads: true\n", env: map[string]string{"RXEDGE_REMOTE_OPERATORS": "alice=" + k1}},
		{name: "former name", yaml: "control:\n  operators: {alice: " + k1 + "}\n  allow_unsigned_reads: true\n", warning: true},
		{name: "former name from the environment", yaml: "control:\n  allow_unsigned_reads: true\n", env: map[string]string{"RXEDGE_CONTROL_OPERATORS": "alice=" + k1}, warning: true},
		{name: "both", yaml: "remote:\n  operators: {alice: " + k1 + "}\ncontrol:\n  operator_keys: [" + k1 + "]\n",
			problem: "control: is the former name of remote: give these settings once, under remote:"},
		{name: "both, one from the environment", yaml: "remote:\n  operators: {alice: " + k1 + "}\n", env: map[string]string{"RXEDGE_CONTROL_OPERATOR_KEYS": k1},
			problem: "control: is the former name of remote"},
		{name: "problems name the section given", yaml: "remote:\n  operator_keys: [nope]\n", problem: `remote.operator_keys: "nope" is not an NKey`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o, err := load(t, tt.yaml, tt.env)
			if tt.problem != "" {
				if err == nil || !strings.Contains(err.Error(), tt.problem) {
					t.Fatalf("got %v, want a problem %q", err, tt.problem)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if o.OperatorNames[k1] != "alice" || len(o.OperatorKeys) != 1 || !o.AllowUnsignedReads {
				t.Errorf("keys %v, names %v, unsigned reads %v", o.OperatorKeys, o.OperatorNames, o.AllowUnsignedReads)
			}
			if got := strings.Join(o.Warnings, "\n"); tt.warning != strings.Contains(got, "rename the section remote:") {
				t.Errorf("warnings %q, want one naming remote: %v", o.Warnings, tt.warning)
			}
		})
	}
}

// Every setting has its variable: true/false ones too.
func TestEnvironmentSetsTrueOrFalse(t *testing.T) {
	var c Config
	env := map[string]string{"RXEDGE_REMOTE_ALLOW_UNSIGNED_READS": "true"}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil || !c.Remote.AllowUnsignedReads {
		t.Fatalf("RXEDGE_REMOTE_ALLOW_UNSIGNED_READS=true: %v, allow_unsigned_reads %v", err, c.Remote.AllowUnsignedReads)
	}
	env["RXEDGE_REMOTE_ALLOW_UNSIGNED_READS"] = "maybe"
	err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err == nil || !strings.Contains(err.Error(), "RXEDGE_REMOTE_ALLOW_UNSIGNED_READS (remote.allow_unsigned_reads): not true or false") {
		t.Fatalf("RXEDGE_REMOTE_ALLOW_UNSIGNED_READS=maybe: %v", err)
	}
	// Every setting's type can be read from a variable.
	walkFields(reflect.ValueOf(&c).Elem(), "", func(path string, v reflect.Value) {
		if err := setFromString(v, ""); err != nil && strings.Contains(err.Error(), "unsupported") {
			t.Errorf("%s: %v", path, err)
		}
	})
}

// The intake section is validated by package intake, its problems
// reported with the others, and set from the environment like the rest.
func TestIntakeSection(t *testing.T) {
	var c Config
	c.StoreID, c.DataDir = "S1", t.TempDir()
	env := map[string]string{
		"RXEDGE_INTAKE_HL7_LISTEN":        "0.0.0.0:2575",
		"RXEDGE_INTAKE_HL7_ALLOWED_HOSTS": "10.0.0.0/8, 192.168.1.20",
		"RXEDGE_INTAKE_ASAP_DIR":          filepath.Join(c.DataDir, "asap"),
	}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	_, err := c.Validate()
	if err == nil || !strings.Contains(err.Error(), "intake.asap.dir: needs intake.formulary") {
		t.Fatalf("a drop folder without a formulary: %v", err)
	}
	form := filepath.Join(c.DataDir, "formulary.csv")
	os.WriteFile(form, []byte("00406-0552-62,CII\n"), 0o600)
	c.Intake.Formulary = form
	o, err := c.Validate()
	if err != nil {
		t.Fatal(err)
	}
	if o.Intake.HL7.Listen != "0.0.0.0:2575" || len(o.Intake.HL7.Allowed) != 2 || o.Intake.ASAP.Dir != env["RXEDGE_INTAKE_ASAP_DIR"] || o.Intake.HL7.MaxConnections == 0 {
		t.Fatalf("intake options %+v", o.Intake)
	}
}

// TestConfigsPointAtREADMESections: every section of the docs the example
// configurations name (docs/store.md, "Section", or README, "Section") is
// a heading of that page.
func TestConfigsPointAtREADMESections(t *testing.T) {
	headings := func(page string) map[string]bool {
		b, err := os.ReadFile(filepath.Join("..", filepath.FromSlash(page)))
		if err != nil {
			t.Fatalf("%s: %v", page, err)
		}
		out := map[string]bool{}
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "#") {
				out[strings.TrimSpace(strings.TrimLeft(l, "#"))] = true
			}
		}
		return out
	}
	files, _ := filepath.Glob(filepath.Join("..", "configs", "*.yaml"))
	if len(files) == 0 {
		t.Fatal("no configs/*.yaml")
	}
	ref := regexp.MustCompile(`(README|docs/[a-z]+\.md),? "([^"]+)"`)
	var n int
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		// A reference may run over comment lines: join them.
		text := regexp.MustCompile(`\n\s*#\s*`).ReplaceAllString(string(raw), " ")
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			page := m[1]
			if page == "README" {
				page = "README.md"
			}
			n++
			if !headings(page)[m[2]] {
				t.Errorf("%s names the section %q of %s, which has none of that name", filepath.Base(f), m[2], page)
			}
		}
	}
	if n == 0 {
		t.Error("no configs/*.yaml names a section of the docs: the check found nothing to check")
	}
}
