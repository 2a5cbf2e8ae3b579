package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/status"
)

// Client sends control commands over an operator's connection. The
// connection's inbox prefix must be one the server lets the operator
// subscribe to (the production template grants _INBOX_<user>.>).
type Client struct {
	nc *nats.Conn
	// Signer, when set, signs every command; commands that change a store
	// need one.
	Signer *command.Signer
	// ValidFor is how long a signed command is valid; 0 means
	// DefaultValidity. At most MaxLifetime.
	ValidFor time.Duration
	// Clock stamps expiries. Default time.Now.
	Clock func() time.Time
}

// NewClient returns a client over nc, signing with signer (nil: unsigned).
func NewClient(nc *nats.Conn, signer *command.Signer) *Client {
	return &Client{nc: nc, Signer: signer}
}

// ErrNoAgent is matched by the error of a command no agent listens to.
var ErrNoAgent = errors.New("remote: no agent answers")

// envelope builds (and signs, when the client can) a command.
func (c *Client) envelope(store, cmd string, args any) (command.Envelope, error) {
	e, err := command.NewEnvelope(store, cmd, args)
	if err != nil {
		return e, err
	}
	if c.Signer == nil {
		if !command.ReadOnly(cmd) {
			return e, fmt.Errorf("remote: %s must be signed: give the operator's seed file (--nkey)", cmd)
		}
		return e, nil // refused unless the store allows unsigned reads
	}
	now, valid := time.Now(), c.ValidFor
	if c.Clock != nil {
		now = c.Clock()
	}
	if valid == 0 {
		valid = command.DefaultValidity
	}
	return e, c.Signer.Sign(&e, now, valid)
}

// Send sends an envelope to its store and decodes the result into out
// (nil to drop it). A failed reply is an *Error; its result, if any (what a
// failed redrive did), is decoded into out all the same.
func (c *Client) Send(ctx context.Context, e command.Envelope, out any) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	subject := command.Subject(e.Store, e.Cmd)
	msg, err := c.nc.RequestWithContext(ctx, subject, data)
	switch {
	case errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%w on %s: the agent of store %s is not connected to this server (or has another store id)", ErrNoAgent, subject, e.Store)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, nats.ErrTimeout):
		return fmt.Errorf("remote: store %s did not answer %s in time: it may be slow, or its answer was lost (for a redrive, check with `hq remote list` what was done): %w", e.Store, e.Cmd, err)
	case err != nil:
		return fmt.Errorf("remote: %s to store %s: %w", e.Cmd, e.Store, err)
	}
	var rep command.Reply
	if err := json.Unmarshal(msg.Data, &rep); err != nil {
		return fmt.Errorf("remote: store %s answered %s with something that is not a reply: %w", e.Store, e.Cmd, err)
	}
	if rep.Store != e.Store {
		return fmt.Errorf("remote: %s for store %s was answered by store %q: check that agent's store_id", e.Cmd, e.Store, rep.Store)
	}
	if out != nil && len(rep.Result) > 0 {
		if err := json.Unmarshal(rep.Result, out); err != nil {
			return fmt.Errorf("remote: store %s answered %s with an unreadable result: %w", e.Store, e.Cmd, err)
		}
	}
	if !rep.OK {
		return &command.Error{Store: e.Store, Cmd: e.Cmd, Code: rep.Code, Msg: rep.Error}
	}
	return nil
}

func (c *Client) call(ctx context.Context, store, cmd string, args, out any) error {
	if !central.ValidStoreID(store) {
		return fmt.Errorf("remote: %q is not a store id (letters, digits, _ and -, at most 32)", store)
	}
	e, err := c.envelope(store, cmd, args)
	if err != nil {
		return err
	}
	return c.Send(ctx, e, out)
}

// Status asks a store for its status document.
func (c *Client) Status(ctx context.Context, store string) (*status.Status, error) {
	var st status.Status
	if err := c.call(ctx, store, command.CmdStatus, nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// List asks a store for its quarantined movements, without payloads.
func (c *Client) List(ctx context.Context, store string, a command.ListArgs) (command.ListResult, error) {
	var res command.ListResult
	err := c.call(ctx, store, command.CmdDLQList, a, &res)
	return res, err
}

// Redrive asks a store to send quarantined movements again. It must be
// signed. On an error the result says what was done, if anything.
func (c *Client) Redrive(ctx context.Context, store string, a command.RedriveArgs) (command.RedriveResult, error) {
	var res command.RedriveResult
	err := c.call(ctx, store, command.CmdDLQRedrive, a, &res)
	return res, err
}

// Reconcile asks a store what it holds for sequences (see ReconcileArgs
// for the limits). It must be signed.
func (c *Client) Reconcile(ctx context.Context, store string, a command.ReconcileArgs) (command.ReconcileResult, error) {
	var res command.ReconcileResult
	err := c.call(ctx, store, command.CmdReconcile, a, &res)
	return res, err
}

// Ledger asks a store for its latest signed checkpoint and, when a.Leaves
// is set, the leaves it holds for those sequences (see LedgerArgs for the
// limits). It must be signed.
func (c *Client) Ledger(ctx context.Context, store string, a command.LedgerArgs) (command.LedgerResult, error) {
	var res command.LedgerResult
	err := c.call(ctx, store, command.CmdLedger, a, &res)
	return res, err
}
