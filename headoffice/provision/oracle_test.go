package provision_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// TestOracle pins what a store learns about other stores through the
// JetStream headers of its own publishes, with the shipped template (one
// account per store) on nats-server v2.15.2. Accounts do not help here:
// every store publishes into the same stream, and these headers are
// checked against the whole stream. Each case asserts today's behaviour,
// so a server upgrade that changes it fails here and the README's
// residual risks are looked at again.
func TestOracle(t *testing.T) {
	h := startProduction(t, 1)
	a := dial(t, h.URL(), storeA) // the curious store
	b := dial(t, h.URL(), storeB) // the other store
	ctx := shortContext

	// S0002 stores one movement, as its agent does.
	const victimKey = "00000000000000000000000000000b0b"
	victim := central.Subject("S0002", victimKey)
	ack, err := b.js.Publish(ctx(t), victim, []byte(`{}`), jetstream.WithMsgID(victimKey), jetstream.WithExpectLastSequencePerSubject(0))
	if err != nil {
		t.Fatal(err)
	}
	probe := 0
	publish := func(hdr nats.Header, msgID string) (*jetstream.PubAck, error) {
		probe++
		m := nats.NewMsg(central.Subject("S0001", fmt.Sprintf("probe%d", probe)))
		m.Header = hdr
		if msgID != "" {
			m.Header.Set(jetstream.MsgIDHeader, msgID)
		}
		return a.js.PublishMsg(ctx(t), m)
	}
	wrongLast := func(err error) bool {
		var ae *jetstream.APIError
		return errors.As(err, &ae) && ae.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
	}

	t.Run("whether another store's key exists, and its sequence", func(t *testing.T) {
		hdr := nats.Header{}
		hdr.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		hdr.Set("Nats-Expected-Last-Subject-Sequence-Subject", victim)
		if _, err := publish(hdr, ""); !wrongLast(err) {
			t.Errorf("probe of a stored key: %v, want wrong last sequence (the key exists)", err)
		}
		hdr.Set("Nats-Expected-Last-Subject-Sequence-Subject", central.Subject("S0002", "ffffffffffffffffffffffffffffffff"))
		if _, err := publish(hdr, ""); err != nil {
			t.Errorf("probe of a key never stored: %v, want success", err)
		}
		hdr.Set("Nats-Expected-Last-Subject-Sequence-Subject", victim)
		hdr.Set(jetstream.ExpectedLastSubjSeqHeader, fmt.Sprint(ack.Sequence))
		if _, err := publish(hdr, ""); err != nil {
			t.Errorf("probe with the key's sequence: %v, want success (the sequence is confirmed)", err)
		}
	})

	t.Run("the stream's last sequence: the fleet's volume", func(t *testing.T) {
		pa, err := publish(nats.Header{}, "")
		if err != nil {
			t.Fatal(err)
		}
		hdr := nats.Header{}
		hdr.Set(jetstream.ExpectedLastSeqHeader, fmt.Sprint(pa.Sequence))
		if _, err := publish(hdr, ""); err != nil {
			t.Errorf("expected last sequence %d: %v, want success (the PubAck's sequence counts every store's messages)", pa.Sequence, err)
		}
	})

	t.Run("the key of the stream's last message", func(t *testing.T) {
		if _, err := b.js.Publish(ctx(t), central.Subject("S0002", "c0c0"), []byte(`{}`), jetstream.WithMsgID("c0c0")); err != nil {
			t.Fatal(err)
		}
		hdr := nats.Header{}
		hdr.Set(jetstream.ExpectedLastMsgIDHeader, "c0c0")
		if _, err := publish(hdr, ""); err != nil {
			t.Errorf("expected last msg id of S0002's message: %v, want success (it names the last writer's key)", err)
		}
	})

	t.Run("another store's recent key, through the duplicate window", func(t *testing.T) {
		pa, err := publish(nats.Header{}, victimKey)
		if err != nil || !pa.Duplicate {
			t.Errorf("a publish with S0002's key as its Nats-Msg-Id: %+v, %v; want a duplicate (S0002 sent it within the window)", pa, err)
		}
	})

	t.Run("pre-empting another store's next key", func(t *testing.T) {
		// Keys are derived from the store id and the movement id; one who
		// can guess S0002's next movement id publishes its key first.
		const next = "00000000000000000000000000000d0d"
		if _, err := publish(nats.Header{}, next); err != nil {
			t.Fatal(err)
		}
		pa, err := b.js.Publish(ctx(t), central.Subject("S0002", next), []byte(`{}`), jetstream.WithMsgID(next), jetstream.WithExpectLastSequencePerSubject(0))
		if err != nil || !pa.Duplicate {
			t.Fatalf("S0002's publish after S0001 used its key: %+v, %v; want a duplicate PubAck", pa, err)
		}
		m, err := directGet(ctx(t), b.nc, central.Subject("S0002", next))
		if err != nil {
			t.Fatal(err)
		}
		if m.Header.Get("Status") != "404" {
			t.Errorf("S0002's movement was stored (status %q): the pre-emption no longer works", m.Header.Get("Status"))
		}
	})

	t.Run("whether another store is alive, through the fleet view", func(t *testing.T) {
		if _, err := b.js.Publish(ctx(t), central.FleetSubject("S0002"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		m := nats.NewMsg(central.FleetSubject("S0001"))
		m.Data = []byte(`{}`)
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
		m.Header.Set("Nats-Expected-Last-Subject-Sequence-Subject", central.FleetSubject("S0002"))
		if _, err := a.js.PublishMsg(ctx(t), m); !wrongLast(err) {
			t.Errorf("probe of S0002's fleet key: %v, want wrong last sequence (S0002 has written)", err)
		}
	})

	t.Run("a rollup cannot wipe the fleet view", func(t *testing.T) {
		m := nats.NewMsg(central.FleetSubject("S0001"))
		m.Data = []byte(`{}`)
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupAll)
		_, err := a.js.PublishMsg(ctx(t), m)
		var ae *jetstream.APIError
		if !errors.As(err, &ae) {
			t.Fatalf("a Nats-Rollup: all publish on the fleet view: %v, want the server's refusal", err)
		}
		t.Logf("refused: %d %s", ae.ErrorCode, ae.Description)
	})
}
