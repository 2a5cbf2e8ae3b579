package hub_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/hub"
)

func TestProvision(t *testing.T) {
	h := startHub(t, hub.Options{SkipProvision: true})
	_, js := connect(t, h.URL())

	// Each step provisions with opts and expects exactly these changes.
	steps := []struct {
		name string
		opts central.StreamOptions
		want []string
	}{
		{name: "create", opts: central.StreamOptions{}, want: []string{"created stream RX_MOVEMENTS", "created stream KV_RX_FLEET"}},
		{name: "again: nothing to do", opts: central.StreamOptions{}, want: nil},
		{name: "shorter duplicate window", opts: central.StreamOptions{DuplicateWindow: 2 * time.Minute},
			want: []string{"duplicate_window: 10m0s -> 2m0s"}},
		{name: "same again: nothing to do", opts: central.StreamOptions{DuplicateWindow: 2 * time.Minute}, want: nil},
		{name: "back to defaults, with a cap", opts: central.StreamOptions{MaxMsgs: 1000},
			want: []string{"duplicate_window: 2m0s -> 10m0s", "max_msgs: unlimited -> 1000"}},
		{name: "cap removed", opts: central.StreamOptions{}, want: []string{"max_msgs: 1000 -> unlimited"}},
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

	s, err := js.Stream(testContext(t), central.StreamName)
	if err != nil {
		t.Fatalf("stream info: %v", err)
	}
	if got := s.CachedInfo().Config.Duplicates; got != central.DefaultDuplicateWindow {
		t.Errorf("duplicate window on the server = %v, want %v", got, central.DefaultDuplicateWindow)
	}
}

func TestProvisionRepairsSettings(t *testing.T) {
	h := startHub(t, hub.Options{SkipProvision: true})
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
	got, err := hub.Provision(testContext(t), js, central.StreamOptions{})
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
		"max_age: 0s -> 840h0m0s",
		"created stream KV_RX_FLEET",
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
	if got, err := hub.Provision(testContext(t), js, central.StreamOptions{}); err != nil || len(got) != 0 {
		t.Errorf("second Provision = %q, %v; want no changes", got, err)
	}
}

func TestProvisionRefusedUpdate(t *testing.T) {
	h := startHub(t, hub.Options{SkipProvision: true})
	_, js := connect(t, h.URL())
	_, err := js.CreateStream(testContext(t), jetstream.StreamConfig{
		Name: central.StreamName, Subjects: []string{"rx.mv.>"}, Storage: jetstream.MemoryStorage,
	})
	if err != nil {
		t.Fatalf("create stream by hand: %v", err)
	}
	changes, err := hub.Provision(testContext(t), js, central.StreamOptions{})
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
