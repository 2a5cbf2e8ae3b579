package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/headoffice/migrate"
	"github.com/rxedge/agent/internal/cli"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestMigrateCLI runs the migration command: it refuses while the
// partitions are missing, then copies, reports a conflict with exit 3 and
// its JSON summary, and copies nothing more when run again.
func TestMigrateCLI(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithSkipProvision())
	js := natstest.JetStream(t, natstest.Connect(t, srv.URL()))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	create := func(o central.StreamOptions) {
		for _, cfg := range []jetstream.StreamConfig{central.StreamConfig(o), central.ArchiveConfig(o)} {
			if _, err := js.CreateStream(ctx, cfg); err != nil {
				t.Fatal(err)
			}
		}
	}
	create(central.StreamOptions{})
	msgs := []central.Message{
		{Store: "S0001", Key: "0123456789abcdef0123456789abcdef", Digest: strings.Repeat("a", 64), Payload: []byte(`{}`)},
		{Store: "S0002", Key: "fedcba9876543210fedcba9876543210", Digest: strings.Repeat("b", 64), Payload: []byte(`{}`)},
	}
	for _, m := range msgs {
		if _, err := js.PublishMsg(ctx, m.Msg()); err != nil {
			t.Fatal(err)
		}
	}
	args := []string{"migrate", "--server", srv.URL(), "--partitions", "2"}

	_, stderr, code := runCLI(t, args...)
	if code != cli.ExitError || !strings.Contains(stderr, "RX_MOVEMENTS_0") || !strings.Contains(stderr, "provision --partitions 2") {
		t.Fatalf("without partitions: exit %d, stderr %q", code, stderr)
	}

	create(central.StreamOptions{Partitions: 2, Partition: 0})
	create(central.StreamOptions{Partitions: 2, Partition: 1})
	// Another payload under the second key is in its partition already.
	clash := msgs[1]
	clash.Digest = strings.Repeat("c", 64)
	m := clash.Msg()
	p := central.Partition(clash.Store, 2)
	m.Subject = central.PartitionSubject(p, 2, clash.Store, clash.Key)
	if _, err := js.PublishMsg(ctx, m); err != nil {
		t.Fatal(err)
	}

	stdout, stderr, code := runCLI(t, append(args, "--json")...)
	var sum migrate.Summary
	if err := json.Unmarshal([]byte(stdout), &sum); err != nil {
		t.Fatalf("--json: %v\n%s", err, stdout)
	}
	if code != cli.ExitAttention || sum.Migrated != 1 || len(sum.Conflicts) != 1 || sum.Conflicts[0].Key != clash.Key || !strings.Contains(stderr, "conflict") {
		t.Fatalf("exit %d, summary %+v, stderr %q", code, sum, stderr)
	}

	stdout, _, code = runCLI(t, args...)
	if code != cli.ExitAttention || !strings.Contains(stdout, "migrated 0, already migrated 1") || !strings.Contains(stdout, "conflict: store S0002 key "+clash.Key) {
		t.Fatalf("again: exit %d, stdout %q", code, stdout)
	}
}
