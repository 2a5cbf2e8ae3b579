package remote_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/remote"
	"github.com/rxedge/agent/testkit/ledgertest"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestSignedCommands sends redrives to a store over a real server: a valid
// signed one is applied once; replayed, expired, unsigned, unknown-key,
// badly signed and misdirected ones are refused, journalled, and change
// nothing; a restart does not reopen the replay window.
func TestSignedCommands(t *testing.T) {
	srv := natstest.StartHub(t)
	op := ledgertest.OperatorSigner(t)
	s := startStore(t, srv.URL(), "S0001", []string{op.PublicKey()}, 10)
	opConn := natstest.Connect(t, srv.URL())
	client := fleet.NewClient(opConn, op)
	ctx := testContext(t)

	// signedRedrive is a redrive of key, signed by signer at now.
	signedRedrive := func(signer *command.Signer, store, key string, now time.Time, validFor time.Duration) command.Envelope {
		t.Helper()
		e, err := command.NewEnvelope(store, command.CmdDLQRedrive, command.RedriveArgs{Selection: dlq.Selection{Keys: []string{key}}, ReasonText: "central raised max_payload"})
		if err != nil {
			t.Fatal(err)
		}
		if signer != nil {
			if err := signer.Sign(&e, now, validFor); err != nil {
				t.Fatal(err)
			}
		}
		return e
	}
	// refused checks the refusal's code, that key stayed quarantined, and
	// that the refusal was journalled with actor and reason.
	refused := func(t *testing.T, err error, code, reason, actor, key string) {
		t.Helper()
		var re *command.Error
		if !errors.As(err, &re) || re.Code != code || !re.Refused() {
			t.Fatalf("error = %v, want a refusal with code %s", err, code)
		}
		if !strings.HasPrefix(re.Msg, reason+": ") {
			t.Errorf("message %q does not start with the reason %q", re.Msg, reason)
		}
		if got := s.state(t, key); got != "quarantined" {
			t.Errorf("key %s is %s after a refused redrive, want quarantined", key, got)
		}
		// Refusals are journalled in aggregate: the first of a cause at
		// once, later ones within RefusalWindow counted in the next event.
		ev := s.events(t, queue.ActionRefused)
		if !slices.ContainsFunc(ev, func(e queue.Event) bool {
			return e.Actor == actor && e.Reason == reason && e.Detail["cmd"] == command.CmdDLQRedrive && e.Count >= 1
		}) {
			t.Errorf("journalled refusals = %+v, want one by %s, reason %s, cmd dlq.redrive", ev, actor, reason)
		}
	}
	actor := "remote:" + op.PublicKey()

	var applied command.Envelope
	t.Run("valid command is applied once", func(t *testing.T) {
		applied = signedRedrive(op, "S0001", s.keys[0], time.Now(), time.Minute)
		var res command.RedriveResult
		if err := client.Send(ctx, applied, &res); err != nil {
			t.Fatalf("redrive: %v", err)
		}
		if res.Redriven != 1 || !slices.Equal(res.Keys, s.keys[:1]) || res.Actor != actor || res.Nonce != applied.Nonce {
			t.Errorf("result = %+v, want key %s redriven by %s with nonce %s", res, s.keys[0], actor, applied.Nonce)
		}
		if got := s.state(t, s.keys[0]); got != "pending" {
			t.Errorf("key is %s, want pending", got)
		}
		acc := s.events(t, remote.ActionRemote)
		if len(acc) != 1 || acc[0].Actor != actor || acc[0].Detail["nonce"] != applied.Nonce || acc[0].Reason != "central raised max_payload" {
			t.Errorf("accepted commands in the journal = %+v, want one with the nonce and reason", acc)
		}
		rd := s.events(t, queue.ActionRedrive)
		if len(rd) != 1 || rd[0].Actor != actor || rd[0].Reason != "central raised max_payload" || !slices.Equal(rd[0].Keys, s.keys[:1]) {
			t.Errorf("redrives in the journal = %+v, want one by %s", rd, actor)
		}
	})

	t.Run("replayed", func(t *testing.T) {
		// Back to the quarantine, so a replay would have something to do.
		s.requarantine(t, s.keys[0])
		err := client.Send(ctx, applied, nil)
		var re *command.Error
		if !errors.As(err, &re) || re.Code != command.CodeReplayed {
			t.Fatalf("replay: error = %v, want %s", err, command.CodeReplayed)
		}
		if n := len(s.events(t, queue.ActionRedrive)); n != 1 {
			t.Errorf("%d redrives journalled after a replay, want 1", n)
		}
		if got := s.state(t, s.keys[0]); got != "quarantined" {
			t.Errorf("key is %s after a replay, want quarantined", got)
		}
		last := s.events(t, queue.ActionRefused)
		if l := last[len(last)-1]; l.Reason != "replayed" || l.Actor != actor || l.Count != 1 {
			t.Errorf("journalled refusal = %+v", l)
		}
	})

	t.Run("replayed after a restart", func(t *testing.T) {
		s.restart(t)
		err := client.Send(ctx, applied, nil)
		var re *command.Error
		if !errors.As(err, &re) || re.Code != command.CodeReplayed {
			t.Fatalf("replay after restart: error = %v, want %s", err, command.CodeReplayed)
		}
	})

	t.Run("expired", func(t *testing.T) {
		e := signedRedrive(op, "S0001", s.keys[1], time.Now().Add(-10*time.Minute), 5*time.Minute)
		refused(t, client.Send(ctx, e, nil), command.CodeExpired, "expired", actor, s.keys[1])
	})

	t.Run("expiring too far ahead", func(t *testing.T) {
		e := signedRedrive(op, "S0001", s.keys[1], time.Now().Add(2*time.Minute), 5*time.Minute)
		refused(t, client.Send(ctx, e, nil), command.CodeExpired, "expires too far ahead", actor, s.keys[1])
	})

	t.Run("unsigned", func(t *testing.T) {
		e := signedRedrive(nil, "S0001", s.keys[1], time.Now(), 0)
		refused(t, client.Send(ctx, e, nil), command.CodeUnsigned, "unsigned", remote.ActorUnsigned, s.keys[1])
	})

	t.Run("key without a signature", func(t *testing.T) {
		e := signedRedrive(op, "S0001", s.keys[1], time.Now(), time.Minute)
		e.Sig = ""
		refused(t, client.Send(ctx, e, nil), command.CodeUnsigned, "unsigned", remote.ActorUnverified, s.keys[1])
	})

	t.Run("unknown key", func(t *testing.T) {
		other := ledgertest.OperatorSigner(t)
		e := signedRedrive(other, "S0001", s.keys[1], time.Now(), time.Minute)
		refused(t, client.Send(ctx, e, nil), command.CodeUnknownKey, "unknown key", remote.ActorUnverified, s.keys[1])
	})

	t.Run("bad signature", func(t *testing.T) {
		e := signedRedrive(op, "S0001", s.keys[2], time.Now(), time.Minute)
		e.Args = mustJSON(t, command.RedriveArgs{Selection: dlq.Selection{Keys: []string{s.keys[1]}}, ReasonText: "central raised max_payload"})
		refused(t, client.Send(ctx, e, nil), command.CodeBadSignature, "bad signature", remote.ActorUnverified, s.keys[1])
		e = signedRedrive(op, "S0001", s.keys[1], time.Now(), time.Minute)
		e.Sig = "not-a-signature!"
		refused(t, client.Send(ctx, e, nil), command.CodeBadSignature, "bad signature", remote.ActorUnverified, s.keys[1])
	})

	t.Run("signed for another store", func(t *testing.T) {
		// The signature covers the subject: sent to this store's subject,
		// it does not verify, and the key it names is not blamed.
		e := signedRedrive(op, "S0002", s.keys[1], time.Now(), time.Minute)
		rep := sendRaw(t, opConn, command.Subject("S0001", command.CmdDLQRedrive), mustJSON(t, e))
		refused(t, &command.Error{Code: rep.Code, Msg: rep.Error}, command.CodeBadSignature, "bad signature", remote.ActorUnverified, s.keys[1])
		e.Store = "S0001"
		refused(t, client.Send(ctx, e, nil), command.CodeBadSignature, "bad signature", remote.ActorUnverified, s.keys[1])
	})

	t.Run("signed for another command", func(t *testing.T) {
		e, err := command.NewEnvelope("S0001", command.CmdStatus, command.RedriveArgs{Selection: dlq.Selection{Keys: []string{s.keys[1]}}, ReasonText: "x"})
		if err != nil {
			t.Fatal(err)
		}
		if err := op.Sign(&e, time.Now(), time.Minute); err != nil {
			t.Fatal(err)
		}
		rep := sendRaw(t, opConn, command.Subject("S0001", command.CmdDLQRedrive), mustJSON(t, e))
		refused(t, &command.Error{Code: rep.Code, Msg: rep.Error}, command.CodeBadSignature, "bad signature", remote.ActorUnverified, s.keys[1])
		e.Cmd = command.CmdDLQRedrive
		refused(t, client.Send(ctx, e, nil), command.CodeBadSignature, "bad signature", remote.ActorUnverified, s.keys[1])
	})

	t.Run("malformed", func(t *testing.T) {
		rep := sendRaw(t, opConn, command.Subject("S0001", command.CmdDLQRedrive), []byte(`{"cmd":"dlq.redrive","extra":1}`))
		refused(t, &command.Error{Code: rep.Code, Msg: rep.Error}, command.CodeMalformed, "malformed", remote.ActorUnverified, s.keys[1])
	})

	t.Run("within the clock tolerance", func(t *testing.T) {
		// Expired 20 seconds ago by the agent's clock: within Skew.
		e := signedRedrive(op, "S0001", s.keys[3], time.Now().Add(-time.Minute-20*time.Second), time.Minute)
		if err := client.Send(ctx, e, nil); err != nil {
			t.Fatalf("a command 20s past its expiry: %v, want it accepted (tolerance %s)", err, command.Skew)
		}
		if got := s.state(t, s.keys[3]); got != "pending" {
			t.Errorf("key is %s, want pending", got)
		}
	})

	t.Run("not found keys are reported", func(t *testing.T) {
		res, err := client.Redrive(ctx, "S0001", command.RedriveArgs{Selection: dlq.Selection{Keys: []string{s.keys[3], s.keys[4]}}, ReasonText: "again"})
		if err != nil {
			t.Fatal(err)
		}
		if res.Redriven != 1 || len(res.NotFound) != 1 || res.NotFound[0] != (dlq.Missing{Key: s.keys[3], State: "pending"}) {
			t.Errorf("result = %+v, want %s redriven and %s not found (pending)", res, s.keys[4], s.keys[3])
		}
	})

	t.Run("bad arguments are refused as given", func(t *testing.T) {
		_, err := client.Redrive(ctx, "S0001", command.RedriveArgs{Selection: dlq.Selection{Keys: []string{"not-a-key"}}, ReasonText: "x"})
		var re *command.Error
		if !errors.As(err, &re) || re.Code != command.CodeBadRequest || !strings.Contains(re.Msg, "not a movement key") {
			t.Errorf("error = %v, want %s naming the key", err, command.CodeBadRequest)
		}
		_, err = client.Redrive(ctx, "S0001", command.RedriveArgs{Selection: dlq.Selection{All: true}})
		if !errors.As(err, &re) || re.Code != command.CodeBadRequest || !strings.Contains(re.Msg, "reason_text") {
			t.Errorf("error = %v, want %s naming reason_text", err, command.CodeBadRequest)
		}
	})

	t.Run("read-only commands", func(t *testing.T) {
		unsigned := fleet.NewClient(opConn, nil)
		var re *command.Error
		if _, err := unsigned.Status(ctx, "S0001"); !errors.As(err, &re) || re.Code != command.CodeUnsigned {
			t.Fatalf("unsigned status: %v, want %s", err, command.CodeUnsigned)
		}
		list, err := client.List(ctx, "S0001", command.ListArgs{})
		// Ten, less k3 and k4 (k0 went back to the quarantine).
		if err != nil || list.Matched != 8 {
			t.Fatalf("signed list: matched %d, %v; want 8", list.Matched, err)
		}
		before := len(s.events(t, remote.ActionRemote))
		if _, err := client.Status(ctx, "S0001"); err != nil {
			t.Fatalf("signed status: %v", err)
		}
		if n := len(s.events(t, remote.ActionRemote)); n != before+1 {
			t.Errorf("a signed status is journalled with its nonce: %d accepted commands, want %d", n, before+1)
		}
		e, _ := command.NewEnvelope("S0001", command.CmdStatus, nil)
		if err := op.Sign(&e, time.Now(), time.Minute); err != nil {
			t.Fatal(err)
		}
		e.Sig = base64.RawURLEncoding.EncodeToString(make([]byte, 64))
		if err := client.Send(ctx, e, nil); !errors.As(err, &re) || re.Code != command.CodeBadSignature {
			t.Errorf("status with a bad signature: %v, want %s", err, command.CodeBadSignature)
		}
		if _, err := unsigned.Redrive(ctx, "S0001", command.RedriveArgs{Selection: dlq.Selection{All: true}, ReasonText: "x"}); err == nil || !strings.Contains(err.Error(), "--nkey") {
			t.Errorf("an unsigned client's redrive: %v, want a local error naming --nkey", err)
		}
	})

	t.Run("unsigned reads when allowed", func(t *testing.T) {
		open := startStoreWith(t, srv.URL(), "S0003", []string{op.PublicKey()}, 2, func(o *remote.Options) { o.AllowUnsignedReads = true })
		unsigned := fleet.NewClient(opConn, nil)
		if st, err := unsigned.Status(ctx, "S0003"); err != nil || st.StoreID != "S0003" {
			t.Fatalf("unsigned status: %+v, %v", st, err)
		}
		if list, err := unsigned.List(ctx, "S0003", command.ListArgs{}); err != nil || list.Matched != 2 {
			t.Fatalf("unsigned list: %+v, %v", list, err)
		}
		e, _ := command.NewEnvelope("S0003", command.CmdDLQRedrive, command.RedriveArgs{Selection: dlq.Selection{All: true}, ReasonText: "x"})
		rep := sendRaw(t, opConn, command.Subject("S0003", command.CmdDLQRedrive), mustJSON(t, e))
		if rep.OK || rep.Code != command.CodeUnsigned {
			t.Fatalf("unsigned redrive: %+v, want %s", rep, command.CodeUnsigned)
		}
		if got := open.state(t, open.keys[0]); got != "quarantined" {
			t.Errorf("key is %s, want quarantined", got)
		}
	})

	t.Run("unknown command", func(t *testing.T) {
		rep := sendRaw(t, opConn, "rx.ctl.S0001.dlq.purge", nil)
		if rep.OK || rep.Code != command.CodeUnknownCommand {
			t.Errorf("reply = %+v, want %s", rep, command.CodeUnknownCommand)
		}
	})
}

// TestReplyTooLarge answers with an error, not silence, when a reply does
// not fit the server's max_payload.
func TestReplyTooLarge(t *testing.T) {
	srv := natstest.StartHub(t, natstest.WithMaxPayload(4096))
	op := ledgertest.OperatorSigner(t)
	startStore(t, srv.URL(), "S0001", []string{op.PublicKey()}, 20)
	client := fleet.NewClient(natstest.Connect(t, srv.URL()), op)
	_, err := client.List(testContext(t), "S0001", command.ListArgs{})
	var re *command.Error
	if !errors.As(err, &re) || re.Code != command.CodeReplyTooLarge || !strings.Contains(re.Msg, "max_payload") {
		t.Fatalf("list of 20 over a 4 KiB limit: %v, want %s", err, command.CodeReplyTooLarge)
	}
	if res, err := client.List(testContext(t), "S0001", command.ListArgs{Limit: 2}); err != nil || len(res.Items) != 2 || res.Matched != 20 {
		t.Errorf("list with a limit: %d items of %d, %v", len(res.Items), res.Matched, err)
	}
}

// TestFleetIsNoStoreID refuses to answer as a store named like the fleet's
// subject token.
func TestFleetIsNoStoreID(t *testing.T) {
	srv := natstest.StartHub(t)
	nc := natstest.Connect(t, srv.URL())
	r := remote.New(remote.Options{StoreID: "fleet"})
	if err := r.Subscribe(nc); err == nil || !strings.Contains(err.Error(), "reserved") {
		t.Errorf("Subscribe as store fleet: %v, want an error saying it is reserved", err)
	}
}

// TestReflectedMessagesAreDroppedUnread reflects JetStream answers onto a
// store's control subject, as a store in the same account can: a publish
// ack and a direct get's answer arrive there without a reply subject, and
// must be neither answered nor journalled.
func TestReflectedMessagesAreDroppedUnread(t *testing.T) {
	srv := natstest.StartHub(t)
	op := ledgertest.OperatorSigner(t)
	s := startStore(t, srv.URL(), "S0001", []string{op.PublicKey()}, 1)
	attacker := natstest.Connect(t, srv.URL())
	seen, err := attacker.SubscribeSync(command.Subject("S0001", ">"))
	if err != nil {
		t.Fatal(err)
	}
	for i, reply := range []string{command.Subject("S0001", command.CmdStatus), command.Subject("S0001", command.CmdDLQRedrive)} {
		m := nats.NewMsg(central.Subject("S0002", fmt.Sprintf("reflect%d", i)))
		m.Reply = reply
		m.Data = []byte(`{}`)
		if err := attacker.PublishMsg(m); err != nil {
			t.Fatal(err)
		}
		got, err := seen.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("the publish ack did not reach %s: %v (the server no longer reflects; the test cannot fail)", reply, err)
		}
		if got.Reply != "" {
			t.Fatalf("a reflected ack with reply subject %q", got.Reply)
		}
	}
	// The responder handles its subscription's messages in order: once a
	// signed command is answered, the reflected ones were handled.
	if _, err := fleet.NewClient(natstest.Connect(t, srv.URL()), op).Status(testContext(t), "S0001"); err != nil {
		t.Fatal(err)
	}
	if ev := s.events(t, queue.ActionRefused); len(ev) != 0 {
		t.Errorf("reflected messages were journalled: %+v", ev)
	}
	if strings.Contains(s.logs.String(), "REMOTE_REFUSED") {
		t.Errorf("reflected messages were logged:\n%s", s.logs)
	}
}

// TestRedriveJournalsWhomTheKeySignedFor: a redrive whose signed
// arguments name an actor (a console's user) is journalled with the
// operator key as the actor and the person beside it, in the remote
// command's event and in each redrive event; an actor outside
// command.ValidActor's alphabet is refused before anything is done. The
// agent's summary says it reads the field, and the field is left out
// when empty, so an older agent, which refuses unknown arguments, is
// sent the arguments it knows.
func TestRedriveJournalsWhomTheKeySignedFor(t *testing.T) {
	srv := natstest.StartHub(t)
	op := ledgertest.OperatorSigner(t)
	s := startStore(t, srv.URL(), "S0001", []string{op.PublicKey()}, 2)
	client := fleet.NewClient(natstest.Connect(t, srv.URL()), op)
	ctx := testContext(t)

	_, err := client.Redrive(ctx, "S0001", command.RedriveArgs{Selection: dlq.Selection{Keys: s.keys[:1]}, ReasonText: "limit raised", Actor: "console:alice@chain.example"})
	if err != nil {
		t.Fatal(err)
	}
	for _, action := range []string{remote.ActionRemote, queue.ActionRedrive} {
		ev := s.events(t, action)
		if len(ev) != 1 || ev[0].Actor != "remote:"+op.PublicKey() || ev[0].Detail[dlq.DetailOnBehalfOf] != "console:alice@chain.example" {
			t.Errorf("%s events = %+v, want one by the key on behalf of console:alice@chain.example", action, ev)
		}
	}
	var ce *command.Error
	_, err = client.Redrive(ctx, "S0001", command.RedriveArgs{Selection: dlq.Selection{Keys: s.keys[1:]}, ReasonText: "x", Actor: "alice <script>"})
	if !errors.As(err, &ce) || ce.Code != command.CodeBadRequest || s.state(t, s.keys[1]) != "quarantined" {
		t.Errorf("an actor with markup: %v, key %s; want bad_request and nothing done", err, s.state(t, s.keys[1]))
	}
	if n := len(s.events(t, remote.ActionRemote)); n != 1 {
		t.Errorf("%d remote events after the refused actor, want 1", n)
	}

	st, err := s.opts.Status()
	if err != nil {
		t.Fatal(err)
	}
	if sum := remote.SummaryOf(st); !slices.Contains(sum.Features, command.FeatureRedriveActor) {
		t.Errorf("summary features = %q, want %s", sum.Features, command.FeatureRedriveActor)
	}
	if b := mustJSON(t, command.RedriveArgs{Selection: dlq.Selection{All: true}, ReasonText: "x"}); strings.Contains(string(b), "actor") {
		t.Errorf("arguments without an actor = %s, want no actor field (older agents refuse it)", b)
	}
}
