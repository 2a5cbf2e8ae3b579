package streams_test

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/testkit/natstest"
)

func TestProvision(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithSkipProvision())
	_, js := connect(t, h.URL())

	// Each step provisions with opts and expects exactly these changes.
	steps := []struct {
		name string
		opts central.StreamOptions
		want []string
	}{
		{name: "create", opts: central.StreamOptions{}, want: []string{"created stream RX_MOVEMENTS", "created stream RX_ARCHIVE", "created stream KV_RX_FLEET", "created stream RX_WITNESS"}},
		{name: "again: nothing to do", opts: central.StreamOptions{}, want: nil},
		{name: "shorter duplicate window", opts: central.StreamOptions{DuplicateWindow: 2 * time.Minute},
			want: []string{"RX_MOVEMENTS: duplicate_window: 10m0s -> 2m0s", "RX_ARCHIVE: duplicate_window: 10m0s -> 2m0s", "RX_WITNESS: duplicate_window: 10m0s -> 2m0s"}},
		{name: "same again: nothing to do", opts: central.StreamOptions{DuplicateWindow: 2 * time.Minute}, want: nil},
		{name: "back to defaults, with a cap", opts: central.StreamOptions{MaxMsgs: 1000},
			want: []string{"RX_MOVEMENTS: duplicate_window: 2m0s -> 10m0s", "RX_MOVEMENTS: max_msgs: unlimited -> 1000", "RX_ARCHIVE: duplicate_window: 2m0s -> 10m0s", "RX_WITNESS: duplicate_window: 2m0s -> 10m0s"}},
		{name: "cap removed", opts: central.StreamOptions{}, want: []string{"RX_MOVEMENTS: max_msgs: 1000 -> unlimited"}},
		{name: "longer horizon and retention", opts: central.StreamOptions{MaxAge: 40 * 24 * time.Hour, Retention: 800 * 24 * time.Hour},
			want: []string{"RX_MOVEMENTS: max_age: 840h0m0s -> 960h0m0s", "RX_ARCHIVE: max_age: 18264h0m0s -> 19200h0m0s", "RX_WITNESS: max_age: 18264h0m0s -> 19200h0m0s"}},
		{name: "back to the defaults: the empty stream's horizon is lowered at once, the longer retention kept", opts: central.StreamOptions{},
			want: []string{"RX_ARCHIVE: kept max_age 19200h0m0s, longer than the retention asked (18264h0m0s): lowering it deletes every record older at once; give --lower-retention to lower it",
				"RX_MOVEMENTS: max_age: 960h0m0s -> 840h0m0s",
				"RX_WITNESS: kept max_age 19200h0m0s, longer than the retention asked (18264h0m0s): lowering it deletes every record older at once; give --lower-retention to lower it"}},
		{name: "the retention lowered when told", opts: central.StreamOptions{LowerRetention: true},
			want: []string{"RX_ARCHIVE: max_age: 19200h0m0s -> 18264h0m0s", "RX_WITNESS: max_age: 19200h0m0s -> 18264h0m0s"}},
		{name: "four partitions", opts: central.StreamOptions{Partitions: 4},
			want: []string{"created stream RX_MOVEMENTS_0", "created stream RX_ARCHIVE_0", "created stream RX_MOVEMENTS_1", "created stream RX_ARCHIVE_1",
				"created stream RX_MOVEMENTS_2", "created stream RX_ARCHIVE_2", "created stream RX_MOVEMENTS_3", "created stream RX_ARCHIVE_3"}},
		{name: "four partitions again: nothing to do", opts: central.StreamOptions{Partitions: 4}, want: nil},
	}
	for _, st := range steps {
		got, err := streams.Provision(testContext(t), js, st.opts)
		if err != nil {
			t.Fatalf("%s: Provision: %v", st.name, err)
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: Provision changes = %q, want %q", st.name, got, st.want)
		}
	}

	s, err := js.Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if got := s.CachedInfo().Config.Duplicates; got != central.DefaultDuplicateWindow {
		t.Errorf("duplicate window on the server = %v, want %v", got, central.DefaultDuplicateWindow)
	}
}

func TestProvisionRepairsSettings(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithSkipProvision())
	_, js := connect(t, h.URL())

	// A stream made by hand, missing most of the settings the product needs.
	_, err := js.CreateStream(testContext(t), jetstream.StreamConfig{
		Name:     central.StreamName,
		Subjects: []string{"rx.mv.>"},
		Storage:  jetstream.FileStorage,
		Metadata: map[string]string{"owner": "ops"},
	})
	if err != nil {
		t.Fatalf("create stream by hand: %v", err)
	}
	got, err := streams.Provision(testContext(t), js, central.StreamOptions{})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	// An unlimited max_age is lowered to the horizon only after the
	// archive exists: this empty stream's at once.
	want := []string{
		"RX_MOVEMENTS: max_msgs_per_subject: unlimited -> 1",
		"RX_MOVEMENTS: discard: DiscardOld -> DiscardNew",
		"RX_MOVEMENTS: discard_new_per_subject: false -> true",
		"RX_MOVEMENTS: deny_delete: false -> true",
		"RX_MOVEMENTS: deny_purge: false -> true",
		"RX_MOVEMENTS: allow_direct: false -> true",
		"RX_MOVEMENTS: allow_atomic: false -> true",
		"RX_MOVEMENTS: duplicate_window: 2m0s -> 10m0s",
		"created stream RX_ARCHIVE",
		"RX_MOVEMENTS: max_age: 0s -> 840h0m0s",
		"created stream KV_RX_FLEET",
		"created stream RX_WITNESS",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Provision changes =\n%q\nwant\n%q", got, want)
	}
	s, err := js.Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if got := s.CachedInfo().Config.Metadata["owner"]; got != "ops" {
		t.Errorf("metadata owner after Provision = %q, want it kept as %q", got, "ops")
	}
	if got, err := streams.Provision(testContext(t), js, central.StreamOptions{}); err != nil || len(got) != 0 {
		t.Errorf("second Provision = %q, %v; want no changes", got, err)
	}
}

func TestProvisionRefusedUpdate(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithSkipProvision())
	_, js := connect(t, h.URL())
	_, err := js.CreateStream(testContext(t), jetstream.StreamConfig{
		Name: central.StreamName, Subjects: []string{"rx.mv.>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("create stream by hand: %v", err)
	}
	changes, err := streams.Provision(testContext(t), js, central.StreamOptions{})
	if err == nil {
		t.Fatal("Provision of a memory stream succeeded, want the server to refuse changing storage")
	}
	if len(changes) == 0 || changes[0] != "RX_MOVEMENTS: storage: Memory -> File" {
		t.Errorf("changes = %q, want them to start with the storage change", changes)
	}
	for _, want := range []string{"hub: update stream RX_MOVEMENTS", "storage: Memory -> File", "can not change storage type"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}

func TestArchiveCaughtUp(t *testing.T) {
	heard := &jetstream.StreamSourceInfo{Name: "RX_MOVEMENTS", Active: time.Second}
	tests := []struct {
		name          string
		total, copied uint64
		src           *jetstream.StreamSourceInfo
		want          bool
	}{
		{"empty stream", 0, 0, nil, true},
		{"no source", 5, 5, nil, false},
		{"never heard from: lag 0 says nothing", 5, 0, &jetstream.StreamSourceInfo{Name: "RX_MOVEMENTS", Active: -1}, false},
		{"still copying", 5, 3, &jetstream.StreamSourceInfo{Name: "RX_MOVEMENTS", Active: time.Second, Lag: 2}, false},
		{"lag 0 but fewer held (new messages since)", 5, 4, heard, false},
		{"source in error", 5, 5, &jetstream.StreamSourceInfo{Name: "RX_MOVEMENTS", Active: time.Second, Error: &jetstream.APIError{Code: 500}}, false},
		{"caught up", 5, 5, heard, true},
		{"caught up, archive holds older ones too", 5, 9, heard, true},
	}
	for _, tc := range tests {
		if got := streams.ArchiveCaughtUp(tc.total, tc.copied, tc.src); got != tc.want {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestProvisionMigratesInPlace takes a movement stream as production
// streams were before the archive (90 days, no archive, movements in it)
// to the layout, with a horizon so short (1 s) that lowering max_age ages
// out every movement already stored at once: the archive must be created,
// copy every movement, and only then may max_age be lowered. Afterwards
// the archive holds every movement exactly once, though the stream has
// aged them all out.
func TestProvisionMigratesInPlace(t *testing.T) {
	h := natstest.StartHub(t, natstest.WithSkipProvision())
	_, js := connect(t, h.URL())
	ctx := testContext(t)
	old := central.StreamConfig(central.StreamOptions{MaxAge: 90 * 24 * time.Hour})
	if _, err := js.CreateStream(ctx, old); err != nil {
		t.Fatal(err)
	}
	const n = 1000
	first := time.Now()
	var acks []jetstream.PubAckFuture
	for i := range n {
		store := fmt.Sprintf("S%04d", i%3)
		key := fmt.Sprintf("%032x", i)
		m := nats.NewMsg(central.Subject(store, key))
		m.Header.Set(jetstream.MsgIDHeader, central.MsgID(key, fmt.Sprintf("%064x", i)))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		m.Data = []byte(`{}`)
		f, err := js.PublishMsgAsync(m)
		if err != nil {
			t.Fatal(err)
		}
		acks = append(acks, f)
	}
	for i, f := range acks {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			t.Fatalf("publish %d: %v", i, err)
		case <-ctx.Done():
			t.Fatalf("publish %d: no ack", i)
		}
	}
	// Every movement must be older than the new horizon before the first
	// provision, so that lowering max_age too early would lose them.
	time.Sleep(time.Until(first.Add(1500 * time.Millisecond)))

	o := central.StreamOptions{MaxAge: time.Second, DuplicateWindow: time.Second}
	lowered := "RX_MOVEMENTS: max_age: 2160h0m0s -> 1s"
	kept := regexp.MustCompile(`^RX_MOVEMENTS: kept max_age 2160h0m0s until RX_ARCHIVE has copied RX_MOVEMENTS \(\d+ of 1000\); run provision again$`)
	changes, err := streams.Provision(ctx, js, o)
	if err != nil {
		t.Fatalf("first provision: %v", err)
	}
	t.Logf("first provision: %q", changes)
	if !slices.Contains(changes, "created stream RX_ARCHIVE") {
		t.Fatalf("first provision did not create the archive: %q", changes)
	}
	// Re-run, as an operator would, until the horizon is lowered; every run
	// before that must say it kept max_age.
	deadline := time.Now().Add(30 * time.Second)
	for !slices.Contains(changes, lowered) {
		held := slices.ContainsFunc(changes, kept.MatchString)
		if !held {
			t.Fatalf("provision neither kept nor lowered max_age: %q", changes)
		}
		if time.Now().After(deadline) {
			t.Fatalf("max_age still kept after 30 s (awaited: the archive copying the stream): %q", changes)
		}
		time.Sleep(50 * time.Millisecond)
		if changes, err = streams.Provision(testContext(t), js, o); err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(changes, lowered) && !slices.ContainsFunc(changes, kept.MatchString) {
			t.Fatalf("a re-run changed something else: %q", changes)
		}
	}
	t.Logf("lowering provision: %q", changes)

	// The stream ages every movement out; the archive keeps them all.
	stream, err := js.Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(30 * time.Second)
	for {
		info, err := stream.Info(testContext(t))
		if err != nil {
			t.Fatal(err)
		}
		if info.State.Msgs == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("RX_MOVEMENTS holds %d messages 30 s after max_age became 1 s (awaited: their expiry)", info.State.Msgs)
		}
		time.Sleep(50 * time.Millisecond)
	}
	keys := archivedKeys(t, js, central.ArchiveStreamName)
	if len(keys) != n {
		t.Fatalf("archive holds %d distinct keys, want %d", len(keys), n)
	}
	for k, c := range keys {
		if c != 1 {
			t.Errorf("archive holds key %s %d times", k, c)
		}
	}
	if got, err := streams.Provision(testContext(t), js, o); err != nil || len(got) != 0 {
		t.Errorf("provision after the migration = %q, %v; want nothing to do", got, err)
	}
}

// archivedKeys reads the whole archive with an ordered consumer and counts
// its messages by movement key (from Nats-Msg-Id).
func archivedKeys(t *testing.T, js jetstream.JetStream, archive string) map[string]int {
	t.Helper()
	ctx := testContext(t)
	s, err := js.Stream(ctx, archive)
	if err != nil {
		t.Fatal(err)
	}
	total := s.CachedInfo().State.Msgs
	c, err := js.OrderedConsumer(ctx, archive, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for seen := uint64(0); seen < total; {
		batch, err := c.Fetch(int(min(total-seen, 500)), jetstream.FetchMaxWait(5*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		got := 0
		for m := range batch.Messages() {
			keys[central.KeyOfMsgID(m.Headers().Get(jetstream.MsgIDHeader))]++
			got++
		}
		if err := batch.Error(); err != nil {
			t.Fatal(err)
		}
		if got == 0 {
			t.Fatalf("read %d of the archive's %d messages, then nothing", seen, total)
		}
		seen += uint64(got)
	}
	return keys
}
