package streams

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
)

// Archives returns, sorted, the archive streams a head-office reader
// reads: of names, those that exist, when names is not nil; else every
// archive stream the server lists. Every reader of the archives (the
// sink, verification, reconciliation) lists them here.
func Archives(ctx context.Context, js jetstream.JetStream, names []string) ([]string, error) {
	var out []string
	if names != nil {
		for _, name := range names {
			_, err := js.Stream(ctx, name)
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("list central's archives: stream %s: %w", name, err)
			}
			out = append(out, name)
		}
	} else {
		l := js.StreamNames(ctx)
		for name := range l.Name() {
			if central.IsArchiveStream(name) {
				out = append(out, name)
			}
		}
		if err := l.Err(); err != nil {
			return nil, fmt.Errorf("list central's archives: %w", err)
		}
	}
	slices.Sort(out)
	return out, nil
}
