package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	stdsync "sync"
	"time"

	"github.com/google/uuid"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/dlq"
	"github.com/rxedge/agent/internal/tally"
	"github.com/rxedge/agent/queue"
	"github.com/rxedge/agent/status"
)

// ActionRemote is the journal action of an accepted signed command,
// recorded before it is applied, with its nonce, expiry and command in
// Detail.
const ActionRemote = queue.ActionRemote

// Actors of remote commands: remote:<operator key> once its signature
// verified, and otherwise one of these.
const (
	actorPrefix     = "remote:"
	ActorUnsigned   = actorPrefix + "unsigned"   // no key, no signature
	ActorUnverified = actorPrefix + "unverified" // a key and signature that did not verify
)

// storeCommands are the commands one store answers on its own subjects.
var storeCommands = []string{command.CmdStatus, command.CmdDLQList, command.CmdDLQRedrive, command.CmdReconcile, command.CmdLedger}

// Options configure a Responder.
type Options struct {
	Queue   *queue.Queue
	DLQ     *dlq.Service
	StoreID string
	// OperatorKeys are the public keys (U…) allowed to sign commands
	// (remote.operator_keys).
	OperatorKeys []string
	// Status builds the status document (the same as `agent status --json`).
	Status func() (*status.Status, error)
	Logger *slog.Logger
	// AllowUnsignedReads lets status and dlq.list through unsigned
	// (remote.allow_unsigned_reads). Default false: every command must
	// be signed.
	AllowUnsignedReads bool
	// Clock is the agent's clock for expiries. Default time.Now.
	Clock func() time.Time
	// PublicKey is the store's current verifier key, for the ledger
	// command ("" when it has none).
	PublicKey func() string
}

// Responder answers the control commands of one store.
type Responder struct {
	o    Options
	keys map[string]nkeys.KeyPair

	mu     stdsync.Mutex
	loaded bool
	nonces map[string]time.Time // accepted nonce → when it can no longer be accepted anyway

	// refusals journals refusals in aggregate (see refusalLog).
	refusals *tally.Reporter[cause, string]
}

// New returns a responder; Subscribe puts it on a connection.
func New(o Options) *Responder {
	if o.Clock == nil {
		o.Clock = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	r := &Responder{o: o, keys: map[string]nkeys.KeyPair{}, nonces: map[string]time.Time{}}
	r.refusals = tally.NewReporter(newRefusalLog().t, o.Clock, func(rs []report) { r.journalRefusals(events(rs)) })
	for _, k := range o.OperatorKeys {
		kp, err := nkeys.FromPublicKey(k)
		if err != nil || !nkeys.IsValidPublicUserKey(k) {
			o.Logger.Warn("OPERATOR_KEY_IGNORED", "key", k, "error", "not an NKey user public key")
			continue
		}
		r.keys[k] = kp
	}
	return r
}

// Subscribe subscribes nc to the store's control subjects,
// rx.ctl.<store>.>: a sync.Engine OnConnect handler. nats.go renews the
// subscription after a reconnect. The first call reloads the nonces of the
// commands accepted within their lifetime from the journal, so a restart
// does not open a replay window.
func (r *Responder) Subscribe(nc *nats.Conn) error {
	if !central.ValidStoreID(r.o.StoreID) {
		return fmt.Errorf("remote: store id %q cannot be used in control subjects (%q is reserved): choose another store_id", r.o.StoreID, central.FleetToken)
	}
	if err := r.loadNonces(); err != nil {
		return err
	}
	// The command is what follows prefix: "dlq.list" in
	// rx.ctl.S0001.dlq.list.
	subject, prefix := command.Subject(r.o.StoreID, ">"), command.Subject(r.o.StoreID, "")
	_, err := nc.Subscribe(subject, func(m *nats.Msg) {
		r.handle(m, strings.TrimPrefix(m.Subject, prefix), nc.MaxPayload())
	})
	if err != nil {
		return fmt.Errorf("remote: subscribe %s: %w", subject, err)
	}
	return nil
}

// loadNonces remembers the nonces of the accepted commands in the journal
// that could still be accepted.
func (r *Responder) loadNonces() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loaded {
		return nil
	}
	now := r.o.Clock()
	// An accepted command expires at most MaxLifetime+Skew after it was
	// accepted, and is refused Skew after that.
	since := now.Add(-(command.MaxLifetime + 2*command.Skew))
	err := r.o.Queue.Events(since, func(e queue.Event) bool {
		if e.Action != ActionRemote {
			return true
		}
		exp, err := time.Parse(time.RFC3339, e.Detail["expires"])
		if err != nil || e.Detail["nonce"] == "" {
			return true
		}
		if until := exp.Add(command.Skew); until.After(now) {
			r.nonces[e.Detail["nonce"]] = until
		}
		return true
	})
	if err != nil {
		return fmt.Errorf("remote: reload accepted nonces from the journal: %w", err)
	}
	r.loaded = true
	return nil
}

// refusal is why a command was refused: its reply code, the reason
// journalled, and the message answered.
type refusal struct {
	code, reason, msg string
}

func (f *refusal) reply(store string) command.Reply {
	return command.Reply{Store: store, Code: f.code, Error: f.reason + ": " + f.msg}
}

// request is one authenticated command.
type request struct {
	cmd    string
	env    command.Envelope
	actor  string
	signed bool
	// onBehalfOf is the person the signed arguments name (a console's
	// user), journalled beside the operator key.
	onBehalfOf string
}

// nonce is the command's nonce when it is a UUID, "" otherwise: what
// the journal and the log may repeat of it.
func (c request) nonce() string {
	if !validNonce(c.env.Nonce) {
		return ""
	}
	return c.env.Nonce
}

// validNonce reports whether s is a UUID in its canonical 36-character
// form.
func validNonce(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil && len(s) == 36
}

// handle serves one message; cmd is its subject's command. A message without a reply subject is
// no command an operator sent (the client always asks for a reply): it is
// what JetStream sends to a reply subject a publisher chose (a PubAck, a
// direct get's answer), and is dropped unread.
func (r *Responder) handle(m *nats.Msg, cmd string, maxPayload int64) {
	if m.Reply == "" {
		return
	}
	rep := r.serve(m.Data, m.Subject, cmd)
	b, err := json.Marshal(rep)
	if err == nil && maxPayload > 0 && int64(len(b)) > maxPayload {
		b, err = json.Marshal(command.Reply{Store: r.o.StoreID, Code: command.CodeReplyTooLarge,
			Error: fmt.Sprintf("the reply (%d bytes) is larger than the server's max_payload (%d bytes): ask for less (a lower limit)", len(b), maxPayload)})
	}
	if err == nil {
		err = m.Respond(b)
	}
	if err != nil {
		r.o.Logger.Warn("REMOTE_REPLY_FAILED", "cmd", cmd, "error", err.Error())
	}
}

// serve authenticates and runs a command that arrived on subject.
func (r *Responder) serve(data []byte, subject, cmd string) command.Reply {
	store := r.o.StoreID
	if !slices.Contains(storeCommands, cmd) {
		return command.Reply{Store: store, Code: command.CodeUnknownCommand, Error: fmt.Sprintf("no command %q on %s: send status, dlq.list, dlq.redrive or reconcile", command.Clip(cmd), command.Subject(store, "…"))}
	}
	c, ref := r.authenticate(data, subject, cmd, store)
	if ref != nil {
		r.refuse(c, ref)
		return ref.reply(store)
	}
	run, reasonText, rerr := r.prepare(&c)
	if rerr == nil {
		if ref := r.accept(c, reasonText); ref != nil {
			r.refuse(c, ref)
			return ref.reply(store)
		}
	}
	var res any
	if rerr == nil {
		res, rerr = run()
	}
	rep := command.Reply{OK: rerr == nil, Store: store}
	// A failed redrive says what it did before it failed.
	if res != nil && (rerr == nil || c.cmd == command.CmdDLQRedrive) {
		if b, err := json.Marshal(res); err == nil {
			rep.Result = b
		}
	}
	if rerr != nil {
		rep.Code, rep.Error = command.CodeFailed, rerr.Error()
		var ie *dlq.InputError
		var be *badRequest
		switch {
		case errors.As(rerr, &be):
			rep.Code, rep.Error = command.CodeBadRequest, be.msg
		case errors.As(rerr, &ie):
			rep.Code = command.CodeBadRequest
		}
	}
	level := slog.LevelDebug
	if c.signed || !rep.OK {
		level = slog.LevelInfo
	}
	r.o.Logger.Log(context.Background(), level, "REMOTE_COMMAND", "cmd", cmd, "actor", c.actor, "nonce", c.nonce(), "ok", rep.OK, "code", rep.Code)
	return rep
}

// badRequest is arguments refused before anything was done.
type badRequest struct{ msg string }

func (e *badRequest) Error() string { return e.msg }

// authenticate checks a command's envelope: its form, then its key and
// signature over subject, then that it is meant for this command and
// store, and its expiry. Until the signature verified the actor is
// ActorUnverified, whatever key the envelope names. An unsigned command
// passes only when it is a read and the agent allows unsigned reads. The
// nonce is checked and taken by accept.
func (r *Responder) authenticate(data []byte, subject, cmd, target string) (request, *refusal) {
	c := request{cmd: cmd, actor: ActorUnverified}
	e, err := command.DecodeEnvelope(data)
	if err != nil {
		return c, &refusal{command.CodeMalformed, "malformed", err.Error()}
	}
	c.env = e
	wrongTarget := func() *refusal {
		switch {
		case e.Cmd != "" && e.Cmd != cmd:
			return &refusal{command.CodeWrongTarget, "wrong command", fmt.Sprintf("the envelope's cmd is not %s, the command of the subject it was sent to", cmd)}
		case e.Store != "" && e.Store != target:
			return &refusal{command.CodeWrongTarget, "wrong store", fmt.Sprintf("the envelope's store is not %s, the store of the subject it was sent to", target)}
		}
		return nil
	}
	if e.Key == "" && e.Sig == "" {
		c.actor = ActorUnsigned
		if !r.o.AllowUnsignedReads || !command.ReadOnly(cmd) {
			return c, &refusal{command.CodeUnsigned, "unsigned", cmd + " must be signed by an operator key listed in remote.operator_keys (hq remote … --nkey SEED_FILE)"}
		}
		return c, wrongTarget()
	}
	switch {
	case !nkeys.IsValidPublicUserKey(e.Key):
		return c, &refusal{command.CodeMalformed, "malformed", "key is not an NKey user public key (U…)"}
	case r.keys[e.Key] == nil:
		return c, &refusal{command.CodeUnknownKey, "unknown key", "the key is not in this agent's remote.operator_keys"}
	case e.Sig == "":
		return c, &refusal{command.CodeUnsigned, "unsigned", "the envelope names a key but has no signature"}
	}
	sig, err := e.Signature()
	if err != nil || r.keys[e.Key].Verify(e.SigningBytes(subject), sig) != nil {
		return c, &refusal{command.CodeBadSignature, "bad signature", "the signature does not verify with the key it names, for this subject"}
	}
	c.actor, c.signed = actorPrefix+e.Key, true
	if ref := wrongTarget(); ref != nil {
		return c, ref
	}
	switch {
	case e.Cmd == "" || e.Store == "":
		return c, &refusal{command.CodeMalformed, "malformed", "a signed envelope must name its cmd and store"}
	case !validNonce(e.Nonce):
		return c, &refusal{command.CodeMalformed, "malformed", "nonce is not a UUID (xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx)"}
	}
	exp, err := time.Parse(time.RFC3339, e.Expires)
	if err != nil {
		return c, &refusal{command.CodeMalformed, "malformed", "expires is not an RFC 3339 time"}
	}
	now := r.o.Clock()
	switch {
	case now.After(exp.Add(command.Skew)):
		return c, &refusal{command.CodeExpired, "expired", fmt.Sprintf("the command expired at %s; the agent's clock reads %s (tolerance %s): send it again, and check both clocks if this repeats", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339), command.Skew)}
	case exp.After(now.Add(command.MaxLifetime + command.Skew)):
		return c, &refusal{command.CodeExpired, "expires too far ahead", fmt.Sprintf("the command expires at %s, more than %s after the agent's clock (%s, tolerance %s): check both clocks", exp.UTC().Format(time.RFC3339), command.MaxLifetime, now.UTC().Format(time.RFC3339), command.Skew)}
	}
	return c, nil
}

// accept takes a signed command's nonce and journals the command, before
// anything is done: a nonce is accepted once, across restarts. Unsigned
// commands are neither remembered nor journalled.
func (r *Responder) accept(c request, reasonText string) *refusal {
	if !c.signed {
		return nil
	}
	exp, _ := time.Parse(time.RFC3339, c.env.Expires) // checked by authenticate
	now := r.o.Clock()
	r.mu.Lock()
	for n, until := range r.nonces {
		if !until.After(now) {
			delete(r.nonces, n)
		}
	}
	_, seen := r.nonces[c.env.Nonce]
	if !seen {
		r.nonces[c.env.Nonce] = exp.Add(command.Skew)
	}
	r.mu.Unlock()
	if seen {
		return &refusal{command.CodeReplayed, "replayed", "the nonce " + c.env.Nonce + " was accepted before: a command is applied once; sign a new one"}
	}
	detail := map[string]string{"cmd": c.cmd, "store": c.env.Store, "nonce": c.env.Nonce, "expires": c.env.Expires}
	if c.onBehalfOf != "" {
		detail[dlq.DetailOnBehalfOf] = c.onBehalfOf
	}
	err := r.o.Queue.Journal(queue.Event{Action: ActionRemote, Actor: c.actor, Reason: reasonText, Detail: detail})
	if err != nil {
		r.mu.Lock()
		delete(r.nonces, c.env.Nonce)
		r.mu.Unlock()
		return &refusal{command.CodeFailed, "not recorded", "the command could not be recorded in the journal, so nothing was done: " + err.Error()}
	}
	return nil
}

// refuse counts a refusal and journals and logs, in aggregate, those
// that are due (see refusalLog): a flood of refusals adds at most one
// event per cause per RefusalWindow, and at most RefusalBytesPerHour, to
// the journal. Refusals not yet due are journalled by a timer.
func (r *Responder) refuse(c request, f *refusal) {
	if f.code == command.CodeFailed {
		r.o.Logger.Warn("REMOTE_REFUSED", "cmd", c.cmd, "actor", c.actor, "reason", f.reason, "nonce", c.nonce())
		return
	}
	r.refusals.Note(cause{code: f.code, reason: f.reason, actor: c.actor}, c.cmd)
}

// flushRefusals journals the refusals that are due: the timer's work.
func (r *Responder) flushRefusals() { r.refusals.Flush() }

func (r *Responder) journalRefusals(evs []queue.Event) {
	for _, ev := range evs {
		if err := r.o.Queue.Journal(ev); err != nil {
			r.o.Logger.Warn("REMOTE_REFUSAL_NOT_JOURNALLED", "cmd", ev.Detail["cmd"], "error", err.Error())
		}
		r.o.Logger.Warn("REMOTE_REFUSED", "cmd", ev.Detail["cmd"], "actor", ev.Actor, "reason", ev.Reason, "count", ev.Count)
	}
}

// Close stops the timer that journals pending refusals; refusals counted
// since the last event are then only in the log.
func (r *Responder) Close() { r.refusals.Close() }

// args decodes a command's arguments strictly into v.
func args(c *request, v any) error {
	if len(c.env.Args) == 0 || string(c.env.Args) == "null" {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(c.env.Args))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil || dec.More() {
		return &badRequest{fmt.Sprintf("the arguments of %s are not valid: %s", c.cmd, argsError(err))}
	}
	return nil
}

// argsError describes a decoding error without quoting the input.
func argsError(err error) string {
	var ute *json.UnmarshalTypeError
	switch {
	case err == nil:
		return "more than one JSON value"
	case errors.As(err, &ute):
		return fmt.Sprintf("field %s must be %s", ute.Field, ute.Type)
	case strings.HasPrefix(err.Error(), "json: unknown field "):
		return strings.TrimPrefix(err.Error(), "json: ")
	}
	return "not a JSON object"
}

func (r *Responder) status() (*status.Status, error) {
	if r.o.Status == nil {
		return nil, errors.New("this agent does not report its status")
	}
	return r.o.Status()
}

// prepare checks a command's arguments and returns what runs it once it is
// accepted, and the reason text to journal with it. Nothing is done, and
// no nonce taken, for arguments refused here.
func (r *Responder) prepare(c *request) (run func() (any, error), reasonText string, err error) {
	switch c.cmd {
	case command.CmdStatus:
		return func() (any, error) { return r.status() }, "", args(c, &struct{}{})
	case command.CmdDLQList:
		var a command.ListArgs
		if err := args(c, &a); err != nil {
			return nil, "", err
		}
		switch {
		case a.Limit < 0:
			return nil, "", &badRequest{"limit must not be negative"}
		case a.Limit == 0:
			a.Limit = command.DefaultListLimit
		case a.Limit > command.MaxListLimit:
			return nil, "", &badRequest{fmt.Sprintf("limit must be at most %d (a reply is one NATS message)", command.MaxListLimit)}
		}
		return func() (any, error) {
			return r.o.DLQ.List(dlq.Filter{Reason: a.Reason, Since: a.Since, Until: a.Until, Limit: a.Limit})
		}, "", nil
	case command.CmdDLQRedrive:
		var a command.RedriveArgs
		if err := args(c, &a); err != nil {
			return nil, "", err
		}
		var spread time.Duration
		if a.Spread != "" {
			d, err := time.ParseDuration(a.Spread)
			if err != nil {
				return nil, "", &badRequest{"spread is not a duration (e.g. 10m)"}
			}
			spread = d
		}
		if a.Actor != "" && !command.ValidActor(a.Actor) {
			return nil, "", &badRequest{fmt.Sprintf("actor must be at most %d letters, digits and . _ @ : + = -", command.MaxActorBytes)}
		}
		reasonText := strings.TrimSpace(a.ReasonText)
		if reasonText == "" && !a.DryRun {
			return nil, "", &badRequest{"reason_text (--reason-text) is required: say why the movements are sent again (it is recorded in the store's audit journal)"}
		}
		c.onBehalfOf = a.Actor
		rq := *c
		return func() (any, error) { return r.redrive(rq, a, reasonText, spread) }, reasonText, nil
	case command.CmdReconcile:
		var a command.ReconcileArgs
		if err := args(c, &a); err != nil {
			return nil, "", err
		}
		n, err := checkSeqs(a.Seqs)
		if err != nil {
			return nil, "", err
		}
		return func() (any, error) { return r.reconcile(a, n) }, "", nil
	case command.CmdLedger:
		var a command.LedgerArgs
		if err := args(c, &a); err != nil {
			return nil, "", err
		}
		if err := checkLeaves(a.Leaves); err != nil {
			return nil, "", err
		}
		return func() (any, error) { return r.ledger(a) }, "", nil
	}
	return nil, "", &badRequest{"no such command"}
}

func (r *Responder) redrive(c request, a command.RedriveArgs, reasonText string, spread time.Duration) (command.RedriveResult, error) {
	res, err := r.o.DLQ.Redrive(context.Background(), dlq.RedriveRequest{
		Selection: a.Selection, Actor: c.actor, OnBehalfOf: a.Actor, ReasonText: reasonText, Spread: spread, DryRun: a.DryRun,
	})
	out := command.RedriveResult{DryRun: res.DryRun, Redriven: len(res.Redriven), Keys: []string{}, NotFound: res.NotFound, Actor: c.actor, Nonce: c.env.Nonce}
	for i, rd := range res.Redriven {
		if i == command.MaxReplyKeys {
			out.MoreKeys = len(res.Redriven) - command.MaxReplyKeys
			break
		}
		out.Keys = append(out.Keys, rd.Key)
	}
	r.o.Logger.Info("REMOTE_REDRIVE", "actor", c.actor, "nonce", c.nonce(), "redriven", out.Redriven, "not_found", len(out.NotFound), "dry_run", a.DryRun)
	return out, err
}
