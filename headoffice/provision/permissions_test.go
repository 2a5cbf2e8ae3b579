package provision_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/synadia-io/orbit.go/jetstreamext"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/central/streams"
	"github.com/rxedge/agent/control"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/headoffice/provision"
	"github.com/rxedge/agent/hub"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/testkit/ledgertest"
)

// productionConfig is the shipped template, loaded as it is: its example
// users and passwords are what these tests log in with.
var productionConfig = filepath.Join("..", "..", "configs", "nats", "production.conf.template")

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

// directGet reads the last message of subject as the agent does: a plain
// request to $JS.API.DIRECT.GET.RX_MOVEMENTS.<subject>.
func directGet(ctx context.Context, nc *nats.Conn, subject string) (*nats.Msg, error) {
	return nc.RequestWithContext(ctx, "$JS.API.DIRECT.GET."+central.StreamName+"."+subject, nil)
}

// partitionedConfig writes the generator's configuration for S0001 and
// S0002 with n partitions; for one partition it is the shipped template.
func partitionedConfig(t *testing.T, n int) string {
	t.Helper()
	if n <= 1 {
		return productionConfig
	}
	var b bytes.Buffer
	if err := provision.CentralConfig(&b, []string{"S0001", "S0002"}, n); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), fmt.Sprintf("central-%d.conf", n))
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// layouts are the partition counts the permission tests run under: the
// shipped template, and a partitioned central in which S0001 (partition
// 1) and S0002 (partition 0) are held apart.
var layouts = []int{1, 4}

// stream is the movement stream that holds store's movements with n
// partitions.
func stream(store string, n int) string {
	return central.MovementStream(central.Partition(store, n), n)
}

// archive is the archive that holds store's movements with n partitions.
func archive(store string, n int) string {
	return central.ArchiveStream(central.Partition(store, n), n)
}

// startProduction starts a server with the generated configuration for n
// partitions and provisions it as its administrator.
func startProduction(t *testing.T, n int) *hub.Hub {
	t.Helper()
	h := startHub(t, hub.Options{
		ConfigFile:     partitionedConfig(t, n),
		Stream:         central.StreamOptions{Partitions: n},
		ConnectOptions: []nats.Option{nats.UserInfo(admin.user, admin.password), nats.CustomInboxPrefix(admin.inbox)},
	})
	var want []string
	for p := range n {
		want = append(want, "created stream "+central.MovementStream(p, n), "created stream "+central.ArchiveStream(p, n))
	}
	want = append(want, "created stream KV_RX_FLEET", "created stream RX_WITNESS")
	if got := h.Provisioned(); !slices.Equal(got, want) {
		t.Fatalf("Provisioned() = %q, want %q", got, want)
	}
	if !h.Server().JetStreamConfig().SyncAlways {
		t.Error("production template: JetStream SyncAlways = false, want true")
	}
	return h
}

func TestProductionConfigStorePermissions(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) { testStorePermissions(t, n) })
	}
}

// testStorePermissions checks, with n partitions, that a store's agent
// does all it needs through the subjects it always uses, and nothing else.
func testStorePermissions(t *testing.T, n int) {
	h := startProduction(t, n)
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
		if want := stream("S0001", n); ack.Stream != want || ack.Duplicate {
			t.Errorf("PubAck = %+v, want a new message in %s", ack, want)
		}
	})

	t.Run("its liveness probe is refused with an API error", func(t *testing.T) {
		// As sync's alive does: central must answer, and store nothing.
		m := nats.NewMsg(central.Subject("S0001", "alive"))
		m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatInt(math.MaxInt64, 10))
		_, err := a.js.PublishMsg(testContext(t), m, jetstream.WithRetryAttempts(0))
		var api *jetstream.APIError
		if !errors.As(err, &api) || api.ErrorCode != jetstream.JSErrCodeStreamWrongLastSequence {
			t.Fatalf("probe error = %v, want API error %d (wrong last sequence)", err, jetstream.JSErrCodeStreamWrongLastSequence)
		}
	})

	t.Run("direct-gets its own movement with a plain request", func(t *testing.T) {
		// As the agent reads it back (sync's lastDigest): no stream info.
		m, err := directGet(testContext(t), a.nc, central.Subject("S0001", "ka"))
		if err != nil {
			t.Fatalf("direct get: %v", err)
		}
		if st := m.Header.Get("Status"); st != "" {
			t.Fatalf("direct get: status %s %s", st, m.Header.Get("Description"))
		}
		if got := m.Header.Get("Rx-Digest"); got != "digest-of-ka" {
			t.Errorf("Rx-Digest = %q, want digest-of-ka", got)
		}
		if string(m.Data) != `{"n":1}` {
			t.Errorf("data = %q, want the movement", m.Data)
		}
		if got, want := m.Header.Get(jetstream.StreamHeader), stream("S0001", n); got != want {
			t.Errorf("answered by stream %q, want %q", got, want)
		}
	})

	t.Run("publishes an atomic batch with no further permission", func(t *testing.T) {
		var msgs []*nats.Msg
		for i := range 3 {
			key := fmt.Sprintf("batch%d", i)
			m := nats.NewMsg(central.Subject("S0001", key))
			m.Header.Set(jetstream.MsgIDHeader, key)
			m.Header.Set(jetstream.ExpectedLastSubjSeqHeader, "0")
			m.Data = []byte(`{}`)
			msgs = append(msgs, m)
		}
		ack, err := jetstreamext.PublishMsgBatch(testContext(t), a.js, msgs)
		if err != nil {
			t.Fatalf("PublishMsgBatch: %v", err)
		}
		if ack.BatchSize != 3 || ack.Stream != stream("S0001", n) {
			t.Errorf("BatchAck = %+v, want 3 messages in %s", ack, stream("S0001", n))
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
				_, err := directGet(shortContext(t), a.nc, central.Subject("S0002", "kb"))
				return err
			},
			violation: `Publish to "$JS.API.DIRECT.GET.RX_MOVEMENTS.rx.mv.S0002.kb"`,
		},
		{
			// Stream info shows every store's counts, and with a subject
			// filter every stored subject; the agent does not need it.
			name: "read the stream's info",
			do: func(t *testing.T) error {
				_, err := a.js.Stream(shortContext(t), central.StreamName)
				return err
			},
			violation: `Publish to "$JS.API.STREAM.INFO.RX_MOVEMENTS"`,
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
			do:        func(t *testing.T) error { return a.js.DeleteStream(shortContext(t), central.StreamName) },
			violation: `Publish to "$JS.API.STREAM.DELETE.RX_MOVEMENTS"`,
		},
		{
			name: "purge the stream",
			do: func(t *testing.T) error {
				_, err := a.nc.RequestWithContext(shortContext(t), "$JS.API.STREAM.PURGE."+central.StreamName, nil)
				return err
			},
			violation: `Publish to "$JS.API.STREAM.PURGE.RX_MOVEMENTS"`,
		},
		{
			name:      "publish to its partition's subject",
			do:        func(t *testing.T) error { return a.nc.Publish(central.PartitionPrefix+"1.S0001.kp", []byte(`{}`)) },
			violation: `Publish to "rx.mvp.1.S0001.kp"`,
		},
		{
			name:      "publish to another store's partition",
			do:        func(t *testing.T) error { return a.nc.Publish(central.PartitionPrefix+"0.S0002.kp", []byte(`{}`)) },
			violation: `Publish to "rx.mvp.0.S0002.kp"`,
		},
		{
			name:      "publish to the archive",
			do:        func(t *testing.T) error { return a.nc.Publish(central.ArchiveSubject("S0001"), []byte(`{}`)) },
			violation: `Publish to "rx.ar.S0001"`,
		},
		{
			name: "direct-get from a partition's stream",
			do: func(t *testing.T) error {
				_, err := a.nc.RequestWithContext(shortContext(t), central.PartitionDirectGetSubject(0, 4, "S0002", "kb"), nil)
				return err
			},
			violation: `Publish to "$JS.API.DIRECT.GET.RX_MOVEMENTS_0.rx.mvp.0.S0002.kb"`,
		},
		{
			name: "direct-get from the archive",
			do: func(t *testing.T) error {
				_, err := a.nc.RequestWithContext(shortContext(t), "$JS.API.DIRECT.GET.RX_ARCHIVE."+central.ArchiveSubject("S0002"), nil)
				return err
			},
			violation: `Publish to "$JS.API.DIRECT.GET.RX_ARCHIVE.rx.ar.S0002"`,
		},
		{
			name: "read the archive's info",
			do: func(t *testing.T) error {
				_, err := a.js.Stream(shortContext(t), archive("S0001", n))
				return err
			},
			violation: `Publish to "$JS.API.STREAM.INFO.` + archive("S0001", n) + `"`,
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

	t.Run("streams and B's movement are intact", func(t *testing.T) {
		// ka, three batch members, and noinbox (the server stored the
		// publish whose ack it could not deliver) in A's partition; kb in
		// B's; nothing anywhere else, nor the liveness probe.
		ad := dial(t, h.URL(), admin)
		want := map[string]uint64{}
		want[stream("S0001", n)] += 5
		want[stream("S0002", n)]++
		for p := range n {
			name := central.MovementStream(p, n)
			s, err := ad.js.Stream(testContext(t), name)
			if err != nil {
				t.Fatalf("stream info as admin: %v", err)
			}
			if got := s.CachedInfo().State.Msgs; got != want[name] {
				t.Errorf("%s holds %d messages, want %d", name, got, want[name])
			}
		}
		m, err := directGet(testContext(t), b.nc, central.Subject("S0002", "kb"))
		if err != nil || m.Header.Get("Status") != "" {
			t.Fatalf("store B reads its movement: %v %s", err, m.Header.Get("Status"))
		}
		if string(m.Data) != `{}` {
			t.Errorf("store B's movement = %q, want the original {}", m.Data)
		}
	})
}

func TestProductionConfigControl(t *testing.T) {
	h := startProduction(t, 1)
	o := dial(t, h.URL(), ops)
	stores := []*client{dial(t, h.URL(), storeA), dial(t, h.URL(), storeB)}

	// Each store answers its own commands, as the agent does.
	for i, c := range stores {
		store := []string{"S0001", "S0002"}[i]
		for _, subj := range []string{"rx.ctl." + store + ".>"} {
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
		if err := o.nc.Publish(central.Subject("S0001", "forged"), []byte(`{}`)); err != nil {
			t.Fatal(err)
		}
		o.wantViolation(t, `Publish to "rx.mv.S0001.forged"`)
	})

	t.Run("operator cannot manage the stream", func(t *testing.T) {
		err := o.js.DeleteStream(shortContext(t), central.StreamName)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("DeleteStream error = %v, want a timeout", err)
		}
		o.wantViolation(t, `Publish to "$JS.API.STREAM.DELETE.RX_MOVEMENTS"`)
	})
}

func TestProductionConfigAdminOnlyProvisions(t *testing.T) {
	for _, n := range layouts {
		t.Run(fmt.Sprintf("partitions=%d", n), func(t *testing.T) { testAdminOnlyProvisions(t, n) })
	}
}

// testAdminOnlyProvisions checks that the administrator creates (in
// startProduction) and updates every stream of n partitions, and does
// nothing else.
func testAdminOnlyProvisions(t *testing.T, n int) {
	h := startProduction(t, n)
	ad := dial(t, h.URL(), admin)

	changes, err := streams.Provision(testContext(t), ad.js, central.StreamOptions{Partitions: n, DuplicateWindow: 5 * time.Minute})
	if err != nil {
		t.Fatalf("admin provisions: %v", err)
	}
	var want []string
	for p := range n {
		want = append(want, central.MovementStream(p, n)+": duplicate_window: 10m0s -> 5m0s", central.ArchiveStream(p, n)+": duplicate_window: 10m0s -> 5m0s")
	}
	want = append(want, central.WitnessStreamName+": duplicate_window: 10m0s -> 5m0s")
	if !slices.Equal(changes, want) {
		t.Errorf("changes = %q, want %q", changes, want)
	}
	err = ad.js.DeleteStream(shortContext(t), central.MovementStream(0, n))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("admin DeleteStream error = %v, want a timeout", err)
	}
	ad.wantViolation(t, `Publish to "$JS.API.STREAM.DELETE.`+central.MovementStream(0, n)+`"`)
	if err := ad.nc.Publish(central.Subject("S0001", "x"), nil); err != nil {
		t.Fatal(err)
	}
	ad.wantViolation(t, `Publish to "rx.mv.S0001.x"`)
}

// TestProductionConfigRemoteControl runs the agent's real control
// responder under the production permissions: an operator asks a store for
// its status, redrives one of its quarantined movements with a signed
// command and gathers the fleet; a store holding that same signed command
// cannot send it.
func TestProductionConfigRemoteControl(t *testing.T) {
	h := startProduction(t, 1)
	signer := ledgertest.OperatorSigner(t)
	queues := map[string]*queue.Queue{}
	var quarantined string
	for _, id := range []identity{storeA, storeB} {
		q, err := queue.Open(queue.Options{Path: filepath.Join(t.TempDir(), "agent.db"), StoreID: id.user})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { q.Close() })
		queues[id.user] = q
		if id == storeA {
			quarantined = quarantineOne(t, q, id.user)
		}
		c := dial(t, h.URL(), id)
		r := remote.New(remote.Options{
			Queue: q, DLQ: dlq.New(q), StoreID: id.user, OperatorKeys: []string{signer.PublicKey()},
			Status: control.New(control.Options{Queue: q, StoreID: id.user}).Status,
		})
		if err := r.Subscribe(c.nc); err != nil {
			t.Fatalf("store %s subscribes its responder: %v", id.user, err)
		}
		if err := c.nc.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	o := dial(t, h.URL(), ops)
	client := fleet.NewClient(o.nc, signer)

	t.Run("operator asks a store for its status", func(t *testing.T) {
		st, err := client.Status(testContext(t), "S0001")
		if err != nil {
			t.Fatalf("status: %v", err)
		}
		if st.StoreID != "S0001" || st.Counts.Quarantined.Total != 1 {
			t.Errorf("status = store %s, %d quarantined; want S0001 with 1", st.StoreID, st.Counts.Quarantined.Total)
		}
	})

	// A redrive signed by the operator, which store B gets hold of.
	env, err := command.NewEnvelope("S0001", command.CmdDLQRedrive, command.RedriveArgs{Selection: dlq.Selection{Keys: []string{quarantined}}, ReasonText: "limit raised"})
	if err != nil {
		t.Fatal(err)
	}
	if err := signer.Sign(&env, time.Now(), time.Minute); err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(env)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("store cannot send an operator's signed command", func(t *testing.T) {
		b := dial(t, h.URL(), storeB)
		_, err := b.nc.RequestWithContext(shortContext(t), command.Subject("S0001", command.CmdDLQRedrive), data)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("request error = %v, want a timeout", err)
		}
		b.wantViolation(t, `Publish to "rx.ctl.S0001.dlq.redrive"`)
		if e := entry(t, queues["S0001"], quarantined); e.State != queue.Quarantined {
			t.Errorf("the movement is %s, want still quarantined", e.State)
		}
	})

	t.Run("operator redrives with a signed command", func(t *testing.T) {
		var res command.RedriveResult
		if err := client.Send(testContext(t), env, &res); err != nil {
			t.Fatalf("redrive: %v", err)
		}
		if res.Redriven != 1 || res.Actor != "remote:"+signer.PublicKey() {
			t.Errorf("result = %+v, want 1 redriven by the operator", res)
		}
		if e := entry(t, queues["S0001"], quarantined); e.State != queue.Pending {
			t.Errorf("the movement is %s, want pending", e.State)
		}
	})
}

// quarantineOne puts one movement of store in its quarantine and returns
// its key.
func quarantineOne(t *testing.T, q *queue.Queue, store string) string {
	t.Helper()
	p, es := movement.Prepare([]byte(`{"movement_id":"M1","type":"dispense","ndc":"12345-6789-01","quantity":1,"unit":"EA","occurred_at":"2026-03-01T09:30:00Z"}`), store, time.Now())
	if es != nil {
		t.Fatalf("prepare: %v", es)
	}
	res, err := q.Enqueue([]movement.Prepared{p})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := q.Lease(time.Now().Add(time.Second), 10); err != nil {
		t.Fatal(err)
	}
	err = q.Settle(queue.Settlement{Quarantines: []queue.QuarantineAt{{Seq: res[0].Seq, Reason: "permanent:too_large", Charge: true,
		Failure: queue.Failure{Kind: "permanent:too_large", Text: "nats: maximum payload exceeded"}}}})
	if err != nil {
		t.Fatal(err)
	}
	return p.KeyString()
}

func entry(t *testing.T, q *queue.Queue, key string) queue.Entry {
	t.Helper()
	k, ok := movement.ParseKey(key)
	if !ok {
		t.Fatalf("bad key %s", key)
	}
	e, err := q.Get(k)
	if err != nil {
		t.Fatal(err)
	}
	return e
}
