package settings

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// pw stands where a password is in the settings these tests write.
const pw = "Hunter2PW"

// passwordForms are the ways a URL, or a list of them, can carry the
// password p: user information, a token, no host at all (nats://u:PW
// reads as a host and a bad port), a bad escape, a password with an '@',
// a query parameter and several URLs in one text.
func passwordForms(p, host string) []string {
	return []string{
		"nats://s0042:" + p + "@" + host,
		"tls://" + p + "@" + host,
		"nats://u:" + p,
		"nats://u:" + p + ":4222",
		"nats:u:" + p,
		"u:" + p + "@" + host,
		"nats://u:" + p + "%zz@" + host,
		"nats://u:" + p + "@[bad",
		"nats://u:p@" + p + "@" + host,
		"nats://" + host + "/?password=" + p,
		"nats://a:" + p + "@" + host + ",nats://b:" + p + "@" + host,
		"nats://" + host + ",nats://u:" + p,
		"nats://u:" + p + "@" + host + ",nats://x:" + p + "2",
	}
}

// settingsWith are configuration files that put value, as a YAML string,
// where each kind of problem quotes what it found: a type error in a list
// of URLs, in a secret and in a number, an item of a list, an address, an
// unknown key's value and name, and a YAML syntax error around it.
func settingsWith(value string) []string {
	q := strconv.Quote(value)
	head := "store_id: S0042\ndata_dir: data\n"
	return []string{
		head + "nats:\n  servers: " + q + "\n",
		head + "nats:\n  servers: [" + q + "]\n",
		head + "nats:\n  servers:\n    - nats://central.example:4222\n    - " + q + "\n",
		head + "nats:\n  user: u\n  password: [" + q + "]\n",
		head + "nats:\n  token: {a: " + q + "}\n",
		head + "ingest:\n  token: [" + q + "]\n  listen: " + q + "\n  allowed_hosts: [" + q + "]\n  allowed_origins: [" + q + "]\n",
		head + "metrics:\n  listen: " + q + "\n  token: [" + q + "]\n",
		head + "sync:\n  max_in_flight: " + q + "\n  attempt_timeout: " + q + "\n",
		head + "intake:\n  hl7:\n    listen: " + q + "\n    allowed_hosts: [" + q + "]\n",
		head + "remote:\n  operator_keys: [" + q + "]\n",
		head + "nats:\n  serverz: " + q + "\n",
		head + q + ": 1\n",
		head + "nats:\n  servers: [" + value + "\n",
		head + "nats:\n  servers: " + value + "\n  password: [x]\n",
	}
}

// loaderMessages are what the agent says about the configuration file at
// path, read as run and doctor read it: the file's problems, or the
// problems of its settings once the environment is applied.
func loaderMessages(t *testing.T, path string, env map[string]string) string {
	t.Helper()
	c, err := LoadFile(path)
	if err != nil {
		return err.Error()
	}
	if err := c.ApplyEnv(func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		return err.Error()
	}
	o, err := c.Validate()
	msg := strings.Join(o.Warnings, "\n")
	if err != nil {
		msg += "\n" + err.Error()
	}
	return msg
}

// No message of the settings loader quotes a password written into a
// URL, in any form, wherever in the file it stands.
func TestSettingsMessagesHidePasswords(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "agent.yaml")
	for _, form := range passwordForms(pw, "central.example:4222") {
		for i, file := range settingsWith(form) {
			if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			if msg := loaderMessages(t, path, nil); strings.Contains(msg, pw[:6]) {
				t.Errorf("file %d with %q: the message quotes the password:\n%s", i, form, msg)
			}
		}
		if err := os.WriteFile(path, []byte("store_id: S0042\ndata_dir: data\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		env := map[string]string{"RXEDGE_NATS_SERVERS": form, "RXEDGE_INGEST_ALLOWED_ORIGINS": form, "RXEDGE_METRICS_LISTEN": form}
		if msg := loaderMessages(t, path, env); strings.Contains(msg, pw[:6]) {
			t.Errorf("variables with %q: the message quotes the password:\n%s", form, msg)
		}
	}
}

// The problem of a type error still says what the file holds when that
// is no secret, so a user sees what to change.
func TestTypeErrorShowsWhatIsNoSecret(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.yaml")
	file := "store_id: S0042\ndata_dir: data\nnats:\n  servers: nats://u:" + pw + "@central.example:4222\nsync:\n  max_in_flight: lots\n"
	if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
		t.Fatal(err)
	}
	msg := loaderMessages(t, path, nil)
	for _, want := range []string{`line 4: nats.servers: want a list of text, got "nats://central.example:4222"`, `line 6: sync.max_in_flight: want a whole number, got "lots"`} {
		if !strings.Contains(msg, want) {
			t.Errorf("got\n%s\nwant a line %q", msg, want)
		}
	}
}

// FuzzSettingsMessages puts a password, in every form a URL can carry
// one, around fuzzed text into every place of the configuration file a
// problem quotes: no message of the loader gives any of it back. The
// password holds no '@' of its own: in nats://u:p@ss, with no host after
// it, nothing tells "ss" from a host, and passwordForms puts a password
// between two '@'s on purpose.
func FuzzSettingsMessages(f *testing.F) {
	for _, s := range [][2]string{{"central.example:4222", ""}, {"[bad", "x"}, {"h:port", "%"}, {"", "@"}, {"h,nats://", ":"}} {
		for form := range passwordForms("", "") {
			f.Add(s[0], s[1], uint8(form))
		}
	}
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, host, secret string, which uint8) {
		secret = "Zq" + secret + "9PW"
		if strings.Contains(host, "Zq") || strings.Contains(host, "9PW") || strings.ContainsAny(secret, "@\x00\r\n") || len(host)+len(secret) > 200 {
			return
		}
		path := filepath.Join(dir, "agent.yaml")
		forms := passwordForms(secret, host)
		form := forms[int(which)%len(forms)]
		for i, file := range settingsWith(form) {
			if err := os.WriteFile(path, []byte(file), 0o600); err != nil {
				t.Fatal(err)
			}
			if msg := loaderMessages(t, path, nil); strings.Contains(msg, "Zq") || strings.Contains(msg, "9PW") {
				t.Fatalf("file %d with %q: the message quotes the password:\n%s", i, form, msg)
			}
		}
	})
}
