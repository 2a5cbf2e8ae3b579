package central_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

func TestStreamConfig(t *testing.T) {
	tests := []struct {
		name   string
		opts   central.StreamOptions
		adjust func(c *jetstream.StreamConfig) // the production defaults, changed
	}{
		{name: "defaults", opts: central.StreamOptions{}, adjust: func(*jetstream.StreamConfig) {}},
		{name: "partition 2 of 4", opts: central.StreamOptions{Partitions: 4, Partition: 2},
			adjust: func(c *jetstream.StreamConfig) { c.Name, c.Subjects = "RX_MOVEMENTS_2", []string{"rx.mvp.2.>"} }},
		{name: "cluster", opts: central.StreamOptions{Replicas: 3}, adjust: func(c *jetstream.StreamConfig) { c.Replicas = 3 }},
		{name: "short window for tests", opts: central.StreamOptions{DuplicateWindow: time.Second},
			adjust: func(c *jetstream.StreamConfig) { c.Duplicates = time.Second }},
		{name: "limits", opts: central.StreamOptions{MaxMsgs: 2, MaxBytes: 4096, MaxMsgSize: 512, MaxAge: time.Hour},
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
				MaxAge:               35 * 24 * time.Hour,
				Replicas:             1,
				MaxMsgs:              -1,
				MaxBytes:             -1,
				MaxMsgSize:           -1,
				MaxConsumers:         -1,
			}
			tc.adjust(&want)
			if got := central.StreamConfig(tc.opts); !reflect.DeepEqual(got, want) {
				t.Errorf("StreamConfig =\n%+v\nwant\n%+v", got, want)
			}
		})
	}
}

func TestArchiveConfig(t *testing.T) {
	want := func(name, stream, filter string) jetstream.StreamConfig {
		return jetstream.StreamConfig{
			Name:        name,
			Description: "RxEdge archive: every stored movement, one subject per store, kept for the retention",
			Sources: []*jetstream.StreamSource{{Name: stream, SubjectTransforms: []jetstream.SubjectTransformConfig{{
				Source: filter, Destination: "rx.ar.{{wildcard(1)}}"}}}},
			Retention: jetstream.LimitsPolicy, Storage: jetstream.FileStorage, Discard: jetstream.DiscardNew,
			DenyDelete: true, DenyPurge: true, AllowDirect: true,
			Duplicates: 10 * time.Minute, MaxAge: 761 * 24 * time.Hour, Replicas: 1,
			MaxMsgs: -1, MaxBytes: -1, MaxMsgSize: -1, MaxConsumers: 32,
		}
	}
	if got, w := central.ArchiveConfig(central.StreamOptions{}), want("RX_ARCHIVE", "RX_MOVEMENTS", "rx.mv.*.*"); !reflect.DeepEqual(got, w) {
		t.Errorf("one partition:\n%+v\nwant\n%+v", got, w)
	}
	if got, w := central.ArchiveConfig(central.StreamOptions{Partitions: 4, Partition: 3}), want("RX_ARCHIVE_3", "RX_MOVEMENTS_3", "rx.mvp.3.*.*"); !reflect.DeepEqual(got, w) {
		t.Errorf("partition 3 of 4:\n%+v\nwant\n%+v", got, w)
	}
}
