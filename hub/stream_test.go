package hub_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/hub"
)

func TestStreamConfig(t *testing.T) {
	tests := []struct {
		name   string
		opts   hub.StreamOptions
		adjust func(c *jetstream.StreamConfig) // the production defaults, changed
	}{
		{name: "defaults", opts: hub.StreamOptions{}, adjust: func(*jetstream.StreamConfig) {}},
		{name: "cluster", opts: hub.StreamOptions{Replicas: 3}, adjust: func(c *jetstream.StreamConfig) { c.Replicas = 3 }},
		{name: "short window for tests", opts: hub.StreamOptions{DuplicateWindow: time.Second},
			adjust: func(c *jetstream.StreamConfig) { c.Duplicates = time.Second }},
		{name: "limits", opts: hub.StreamOptions{MaxMsgs: 2, MaxBytes: 4096, MaxMsgSize: 512, MaxAge: time.Hour},
			adjust: func(c *jetstream.StreamConfig) {
				c.MaxMsgs, c.MaxBytes, c.MaxMsgSize, c.MaxAge = 2, 4096, 512, time.Hour
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := jetstream.StreamConfig{
				Name:                 "RX_MOVEMENTS",
				Description:          "RxEdge inventory movements, one message per store and key",
				Subjects:             []string{"rx.mv.>"},
				Retention:            jetstream.LimitsPolicy,
				Storage:              jetstream.FileStorage,
				MaxMsgsPerSubject:    1,
				Discard:              jetstream.DiscardNew,
				DiscardNewPerSubject: true,
				DenyDelete:           true,
				DenyPurge:            true,
				AllowDirect:          true,
				AllowAtomicPublish:   true,
				Duplicates:           10 * time.Minute,
				MaxAge:               90 * 24 * time.Hour,
				Replicas:             1,
				MaxMsgs:              -1,
				MaxBytes:             -1,
				MaxMsgSize:           -1,
				MaxConsumers:         -1,
			}
			tc.adjust(&want)
			if got := hub.StreamConfig(tc.opts); !reflect.DeepEqual(got, want) {
				t.Errorf("StreamConfig =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestProvision(t *testing.T) {
	h := startHub(t, hub.Options{SkipProvision: true})
	_, js := connect(t, h.URL())

	// Each step provisions with opts and expects exactly these changes.
	steps := []struct {
		name string
		opts hub.StreamOptions
		want []string
	}{
		{name: "create", opts: hub.StreamOptions{}, want: []string{"created stream RX_MOVEMENTS"}},
		{name: "again: nothing to do", opts: hub.StreamOptions{}, want: nil},
		{name: "shorter duplicate window", opts: hub.StreamOptions{DuplicateWindow: 2 * time.Minute},
			want: []string{"duplicate_window: 10m0s -> 2m0s"}},
		{name: "same again: nothing to do", opts: hub.StreamOptions{DuplicateWindow: 2 * time.Minute}, want: nil},
		{name: "back to defaults, with a cap", opts: hub.StreamOptions{MaxMsgs: 1000},
			want: []string{"duplicate_window: 2m0s -> 10m0s", "max_msgs: unlimited -> 1000"}},
		{name: "cap removed", opts: hub.StreamOptions{}, want: []string{"max_msgs: 1000 -> unlimited"}},
	}
	for _, st := range steps {
		got, err := hub.Provision(testContext(t), js, st.opts)
		if err != nil {
			t.Fatalf("%s: Provision: %v", st.name, err)
		}
		if !slices.Equal(got, st.want) {
			t.Errorf("%s: Provision changes = %q, want %q", st.name, got, st.want)
		}
	}

	s, err := js.Stream(testContext(t), hub.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if got := s.CachedInfo().Config.Duplicates; got != hub.DefaultDuplicateWindow {
		t.Errorf("duplicate window on the server = %v, want %v", got, hub.DefaultDuplicateWindow)
	}
}

func TestProvisionRepairsSettings(t *testing.T) {
	h := startHub(t, hub.Options{SkipProvision: true})
	_, js := connect(t, h.URL())

	// A stream made by hand, missing most of the settings the product needs.
	_, err := js.CreateStream(testContext(t), jetstream.StreamConfig{
		Name:     hub.StreamName,
		Subjects: []string{"rx.mv.>"},
		Storage:  jetstream.FileStorage,
		Metadata: map[string]string{"owner": "ops"},
	})
	if err != nil {
		t.Fatalf("create stream by hand: %v", err)
	}
	got, err := hub.Provision(testContext(t), js, hub.StreamOptions{})
	if err != nil {
		t.Fatalf("Provision: %v", err)
	}
	want := []string{
		"max_msgs_per_subject: unlimited -> 1",
		"discard: DiscardOld -> DiscardNew",
		"discard_new_per_subject: false -> true",
		"deny_delete: false -> true",
		"deny_purge: false -> true",
		"allow_direct: false -> true",
		"allow_atomic: false -> true",
		"duplicate_window: 2m0s -> 10m0s",
		"max_age: 0s -> 2160h0m0s",
	}
	if !slices.Equal(got, want) {
		t.Errorf("Provision changes =\n%q\nwant\n%q", got, want)
	}
	s, err := js.Stream(testContext(t), hub.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if got := s.CachedInfo().Config.Metadata["owner"]; got != "ops" {
		t.Errorf("metadata owner after Provision = %q, want it kept as %q", got, "ops")
	}
	if got, err := hub.Provision(testContext(t), js, hub.StreamOptions{}); err != nil || len(got) != 0 {
		t.Errorf("second Provision = %q, %v; want no changes", got, err)
	}
}

func TestProvisionRefusedUpdate(t *testing.T) {
	h := startHub(t, hub.Options{SkipProvision: true})
	_, js := connect(t, h.URL())
	_, err := js.CreateStream(testContext(t), jetstream.StreamConfig{
		Name: hub.StreamName, Subjects: []string{"rx.mv.>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("create stream by hand: %v", err)
	}
	changes, err := hub.Provision(testContext(t), js, hub.StreamOptions{})
	if err == nil {
		t.Fatal("Provision of a memory stream succeeded, want the server to refuse changing storage")
	}
	if len(changes) == 0 || changes[0] != "storage: Memory -> File" {
		t.Errorf("changes = %q, want them to start with the storage change", changes)
	}
	for _, want := range []string{"hub: update stream RX_MOVEMENTS", "storage: Memory -> File", "can not change storage type"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not contain %q", err, want)
		}
	}
}
