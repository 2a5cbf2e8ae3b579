package sync

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// aliveKey is the last subject token of the liveness probe. A movement's
// key is 32 hexadecimal digits, so no movement ever uses it.
const aliveKey = "alive"

// aliveExpect is the last sequence the liveness probe expects for its
// subject: the largest the server parses, which no subject ever reaches.
var aliveExpect = strconv.FormatInt(math.MaxInt64, 10)

// errAliveStored: central stored a liveness probe, which it never should.
var errAliveStored = errors.New("sync: central stored a liveness probe")

// alive asks central whether it answers publishes for the store, with a
// publish that central must answer and that stores nothing: a message on
// the store's own subject rx.mv.<store>.alive (which the store's
// permissions allow) expecting that subject's last sequence to be one it
// can never have. The stream leader refuses it with an API error (wrong
// last sequence); that refusal is the answer. It takes the same path as a
// movement — the stream's subject, its leader — so an answer means central
// is taking publishes for this store; no answer (a timeout, "no
// responders") means it is not.
func (t *jsTransport) alive(ctx context.Context, store string) error {
	m := nats.NewMsg(central.Subject(store, aliveKey))
	m.Header.Set(central.HeaderExpectLast, aliveExpect)
	_, err := t.js.PublishMsg(ctx, m, jetstream.WithRetryAttempts(0))
	var api *jetstream.APIError
	switch {
	case errors.As(err, &api):
		return nil
	case err == nil:
		return errAliveStored
	case errors.Is(err, nats.ErrNoResponders) || errors.Is(err, jetstream.ErrNoStreamResponse):
		if js, _ := t.nc.ConnectedServerJetStream(); !js && t.nc.IsConnected() {
			return fmt.Errorf("%w: %w", errNoJetStream, err)
		}
	}
	return err
}
