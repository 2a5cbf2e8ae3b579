package hub_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/rxedge/agent/hub"
)

// productionConfig is the shipped template, loaded as it is: its example
// users and passwords are what these tests log in with.
var productionConfig = filepath.Join("..", "configs", "nats", "production.conf.template")

// identity is one user of the production template; inbox is the custom
// inbox prefix its clients use, empty for nats.go's default "_INBOX".
type identity struct{ user, password, inbox string }

var (
	admin  = identity{"admin", "CHANGE-ME-admin", "_INBOX_admin"}
	ops    = identity{"ops", "CHANGE-ME-ops", "_INBOX_ops"}
	storeA = identity{"S0001", "CHANGE-ME-S0001", "_INBOX_S0001"}
	storeB = identity{"S0002", "CHANGE-ME-S0002", "_INBOX_S0002"}
)

// client is a connection whose asynchronous errors (where the server's
// permission violations arrive) the test can wait for.
type client struct {
	nc     *nats.Conn
	js     jetstream.JetStream
	errors chan error
}

func dial(t *testing.T, url string, id identity) *client {
	t.Helper()
	c := &client{errors: make(chan error, 64)}
	opts := []nats.Option{
		nats.UserInfo(id.user, id.password),
		nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
			select {
			case c.errors <- err:
			default:
			}
		}),
	}
	if id.inbox != "" {
		opts = append(opts, nats.CustomInboxPrefix(id.inbox))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", id.user, err)
	}
	t.Cleanup(nc.Close)
	c.nc = nc
	if c.js, err = jetstream.New(nc); err != nil {
		t.Fatalf("jetstream as %s: %v", id.user, err)
	}
	return c
}

// wantViolation waits for the server's permissions violation that names
// what, e.g. `Publish to "rx.mv.S0002.k"`.
func (c *client) wantViolation(t *testing.T, what string) {
	t.Helper()
	want := "nats: permissions violation: Permissions Violation for " + what
	timeout := time.After(5 * time.Second)
	for {
		select {
		case err := <-c.errors:
			if !errors.Is(err, nats.ErrPermissionViolation) {
				t.Errorf("async error %v is not nats.ErrPermissionViolation", err)
				continue
			}
			if strings.HasPrefix(err.Error(), want) {
				return
			}
			t.Logf("skipping async error %q while waiting for %q", err, want)
		case <-timeout:
			t.Fatalf("no async error %q within 5s", want)
		}
	}
}

func shortContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 500*time.Millisecond)
	t.Cleanup(cancel)
	return ctx
}

func startProduction(t *testing.T) *hub.Hub {
	t.Helper()
	h := startHub(t, hub.Options{
		ConfigFile:     productionConfig,
		ConnectOptions: []nats.Option{nats.UserInfo(admin.user, admin.password), nats.CustomInboxPrefix(admin.inbox)},
	})
	if got, want := h.Provisioned(), []string{"created stream RX_MOVEMENTS"}; !slices.Equal(got, want) {
		t.Fatalf("Provisioned() = %q, want %q", got, want)
	}
	if !h.Server().JetStreamConfig().SyncAlways {
		t.Error("production template: JetStream SyncAlways = false, want true")
	}
	return h
}

func TestProductionConfigStorePermissions(t *testing.T) {
	h := startProduction(t)
	a := dial(t, h.URL(), storeA)
	b := dial(t, h.URL(), storeB)

	// B's movement, which A must neither overwrite nor read.
	if _, err := publish(testContext(t), b.js, "S0002", "kb", []byte(`{}`)); err != nil {
		t.Fatalf("store B publishes its movement: %v", err)
	}

	t.Run("publishes its own movement", func(t *testing.T) {
		ack, err := publish(testContext(t), a.js, "S0001", "ka", []byte(`{"n":1}`))
		if err != nil {
			t.Fatalf("publish: %v", err)
		}
		if ack.Stream != hub.StreamName || ack.Duplicate {
			t.Errorf("PubAck = %+v, want a new message in %s", ack, hub.StreamName)
		}
	})

	t.Run("direct-gets its own movement", func(t *testing.T) {
		s, err := a.js.Stream(testContext(t), hub.StreamName)
		if err != nil {
			t.Fatalf("stream info: %v", err)
		}
		m, err := s.GetLastMsgForSubject(testContext(t), hub.Subject("S0001", "ka"))
		if err != nil {
			t.Fatalf("GetLastMsgForSubject: %v", err)
		}
		if got := m.Header.Get("Rx-Digest"); got != "digest-of-ka" {
			t.Errorf("Rx-Digest = %q, want digest-of-ka", got)
		}
	})

	t.Run("publishes an atomic batch with no further permission", func(t *testing.T) {
		var msgs []*nats.Msg
		for i := range 3 {
			key := fmt.Sprintf("batch%d", i)
			m := nats.NewMsg(hub.Subject("S0001", key))
			m.Header.Set(jetstream.MsgIDHeader, key)
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
			m.Data = []byte(`{}`)
			msgs = append(msgs, m)
		}
		ack, err := jetstreamext.PublishMsgBatch(testContext(t), a.js, msgs)
		if err != nil {
			t.Fatalf("PublishMsgBatch: %v", err)
		}
		if ack.BatchSize != 3 {
			t.Errorf("BatchAck.BatchSize = %d, want 3", ack.BatchSize)
		}
	})

	t.Run("heartbeat", func(t *testing.T) {
		o := dial(t, h.URL(), ops)
		sub, err := o.nc.SubscribeSync("rx.status.>")
		if err != nil {
			t.Fatal(err)
		}
		if err := o.nc.Flush(); err != nil {
			t.Fatal(err)
		}
		if err := a.nc.Publish("rx.status.S0001", []byte(`{"state":"online"}`)); err != nil {
			t.Fatal(err)
		}
		m, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("operator waiting for store A's heartbeat: %v", err)
		}
		if m.Subject != "rx.status.S0001" {
			t.Errorf("heartbeat subject = %q, want rx.status.S0001", m.Subject)
		}
	})

	// Each denied action is refused by the server with a permissions
	// violation that reaches only the connection's async error handler.
	denied := []struct {
		name      string
		do        func(t *testing.T) error
		violation string
	}{
		{
			name: "publish to another store's movement subject",
			do: func(t *testing.T) error {
				_, err := publish(shortContext(t), a.js, "S0002", "kb", []byte(`{"forged":true}`))
				return err
			},
			violation: `Publish to "rx.mv.S0002.kb"`,
		},
		{
			name:      "send another store's heartbeat",
			do:        func(t *testing.T) error { return a.nc.Publish("rx.status.S0002", nil) },
			violation: `Publish to "rx.status.S0002"`,
		},
		{
			name:      "send a control command",
			do:        func(t *testing.T) error { return a.nc.Publish("rx.ctl.S0002.dlq.redrive", []byte(`{}`)) },
			violation: `Publish to "rx.ctl.S0002.dlq.redrive"`,
		},
		{
			name: "direct-get another store's movement",
			do: func(t *testing.T) error {
				s, err := a.js.Stream(testContext(t), hub.StreamName)
				if err != nil {
					t.Fatalf("stream info: %v", err)
				}
				_, err = s.GetLastMsgForSubject(shortContext(t), hub.Subject("S0002", "kb"))
				return err
			},
			violation: `Publish to "$JS.API.DIRECT.GET.RX_MOVEMENTS.rx.mv.S0002.kb"`,
		},
		{
			name: "read a message through the non-direct API",
			do: func(t *testing.T) error {
				_, err := a.nc.Request("$JS.API.STREAM.MSG.GET.RX_MOVEMENTS", []byte(`{"last_by_subj":"rx.mv.S0002.kb"}`), 500*time.Millisecond)
				return err
			},
			violation: `Publish to "$JS.API.STREAM.MSG.GET.RX_MOVEMENTS"`,
		},
		{
			name:      "delete the stream",
			do:        func(t *testing.T) error { return a.js.DeleteStream(shortContext(t), hub.StreamName) },
			violation: `Publish to "$JS.API.STREAM.DELETE.RX_MOVEMENTS"`,
		},
		{
			name: "purge the stream",
			do: func(t *testing.T) error {
				s, err := a.js.Stream(testContext(t), hub.StreamName)
				if err != nil {
					t.Fatalf("stream info: %v", err)
				}
				return s.Purge(shortContext(t))
			},
			violation: `Publish to "$JS.API.STREAM.PURGE.RX_MOVEMENTS"`,
		},
		{
			name: "subscribe to another store's inbox",
			do: func(t *testing.T) error {
				_, err := a.nc.SubscribeSync("_INBOX_S0002.>")
				return err
			},
			violation: `Subscription to "_INBOX_S0002.>"`,
		},
		{
			name: "subscribe to the default inbox",
			do: func(t *testing.T) error {
				_, err := a.nc.SubscribeSync("_INBOX.>")
				return err
			},
			violation: `Subscription to "_INBOX.>"`,
		},
		{
			name: "subscribe to another store's control commands",
			do: func(t *testing.T) error {
				_, err := a.nc.SubscribeSync("rx.ctl.S0002.>")
				return err
			},
			violation: `Subscription to "rx.ctl.S0002.>"`,
		},
	}
	for _, tc := range denied {
		t.Run("cannot "+tc.name, func(t *testing.T) {
			err := tc.do(t)
			t.Logf("caller's error: %v", err)
			a.wantViolation(t, tc.violation)
			// A denied request gets no answer: the caller sees only its own
			// timeout. Plain publishes and subscribes return nil.
			if err != nil && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
				t.Errorf("caller's error = %v, want nil or a timeout", err)
			}
		})
	}

	t.Run("cannot get publish acks without its inbox prefix", func(t *testing.T) {
		plain := dial(t, h.URL(), identity{user: storeA.user, password: storeA.password})
		_, err := publish(shortContext(t), plain.js, "S0001", "noinbox", []byte(`{}`))
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("publish error = %v, want a timeout: the ack has nowhere to go", err)
		}
		plain.wantViolation(t, `Subscription to "_INBOX.`)
	})

	t.Run("stream and B's movement are intact", func(t *testing.T) {
		s, err := b.js.Stream(testContext(t), hub.StreamName)
		if err != nil {
			t.Fatalf("stream info: %v", err)
		}
		// kb, ka, three batch members, and noinbox: the server stored the
		// publish whose ack it could not deliver.
		if got := s.CachedInfo().State.Msgs; got != 6 {
			t.Errorf("stream holds %d messages, want 6", got)
		}
		m, err := s.GetLastMsgForSubject(testContext(t), hub.Subject("S0002", "kb"))
		if err != nil {
			t.Fatalf("store B reads its movement: %v", err)
		}
		if string(m.Data) != `{}` {
			t.Errorf("store B's movement = %q, want the original {}", m.Data)
		}
	})
}

func TestProductionConfigControl(t *testing.T) {
	h := startProduction(t)
	o := dial(t, h.URL(), ops)
	stores := []*client{dial(t, h.URL(), storeA), dial(t, h.URL(), storeB)}

	// Each store answers its own commands and the fleet's, as the agent does.
	for i, c := range stores {
		store := []string{"S0001", "S0002"}[i]
		for _, subj := range []string{"rx.ctl." + store + ".>", "rx.ctl.fleet.>"} {
			_, err := c.nc.Subscribe(subj, func(m *nats.Msg) {
				_ = m.Respond([]byte(store + " " + m.Subject))
			})
			if err != nil {
				t.Fatalf("store %s subscribes %s: %v", store, subj, err)
			}
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("operator commands one store", func(t *testing.T) {
		resp, err := o.nc.Request("rx.ctl.S0001.status", nil, 5*time.Second)
		if err != nil {
			t.Fatalf("request rx.ctl.S0001.status: %v", err)
		}
		if got, want := string(resp.Data), "S0001 rx.ctl.S0001.status"; got != want {
			t.Errorf("reply = %q, want %q", got, want)
		}
	})

	t.Run("operator asks the fleet", func(t *testing.T) {
		inbox := o.nc.NewInbox()
		sub, err := o.nc.SubscribeSync(inbox)
		if err != nil {
			t.Fatal(err)
		}
		if err := o.nc.PublishRequest("rx.ctl.fleet.status", inbox, nil); err != nil {
			t.Fatal(err)
		}
		var got []string
		for range stores {
			m, err := sub.NextMsg(5 * time.Second)
			if err != nil {
				t.Fatalf("waiting for fleet replies, have %q: %v", got, err)
			}
			got = append(got, string(m.Data))
		}
		slices.Sort(got)
		if want := []string{"S0001 rx.ctl.fleet.status", "S0002 rx.ctl.fleet.status"}; !slices.Equal(got, want) {
			t.Errorf("fleet replies = %q, want %q", got, want)
		}
	})

	t.Run("store cannot publish into the operator's inbox unasked", func(t *testing.T) {
		// allow_responses lets a store answer a request it received, and
		// publish nowhere else in the operator's inbox.
		a := stores[0]
		if err := a.nc.Publish("_INBOX_ops.forged", nil); err != nil {
			t.Fatal(err)
		}
		a.wantViolation(t, `Publish to "_INBOX_ops.forged"`)
	})

	t.Run("operator cannot publish movements", func(t *testing.T) {
		if err := o.nc.Publish(hub.Subject("S0001", "forged"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		o.wantViolation(t, `Publish to "rx.mv.S0001.forged"`)
	})

	t.Run("operator cannot manage the stream", func(t *testing.T) {
		err := o.js.DeleteStream(shortContext(t), hub.StreamName)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("DeleteStream error = %v, want a timeout", err)
		}
		o.wantViolation(t, `Publish to "$JS.API.STREAM.DELETE.RX_MOVEMENTS"`)
	})
}

func TestProductionConfigAdminOnlyProvisions(t *testing.T) {
	h := startProduction(t)
	ad := dial(t, h.URL(), admin)

	changes, err := hub.Provision(testContext(t), ad.js, hub.StreamOptions{DuplicateWindow: 5 * time.Minute})
	if err != nil {
		t.Fatalf("admin provisions: %v", err)
	}
	if want := []string{"duplicate_window: 10m0s -> 5m0s"}; !slices.Equal(changes, want) {
		t.Errorf("changes = %q, want %q", changes, want)
	}
	err = ad.js.DeleteStream(shortContext(t), hub.StreamName)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("admin DeleteStream error = %v, want a timeout", err)
	}
	ad.wantViolation(t, `Publish to "$JS.API.STREAM.DELETE.RX_MOVEMENTS"`)
	if err := ad.nc.Publish(hub.Subject("S0001", "x"), nil); err != nil {
		t.Fatal(err)
	}
	ad.wantViolation(t, `Publish to "rx.mv.S0001.x"`)
}
