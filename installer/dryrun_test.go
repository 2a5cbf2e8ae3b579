package installer

import "testing"

func TestRedactSecrets(t *testing.T) {
	in := "nats:\n  user: \"S0107\"\n  password: \"hunter2\"\n  token: abc\ningest:\n  token: \"\"\n  token_file: /etc/rxedge/ingest.token\n"
	want := "nats:\n  user: \"S0107\"\n  password: \"<redacted>\"\n  token: \"<redacted>\"\ningest:\n  token: \"\"\n  token_file: /etc/rxedge/ingest.token\n"
	if got := redactSecrets(in); got != want {
		t.Errorf("redactSecrets =\n%s\nwant\n%s", got, want)
	}
}
