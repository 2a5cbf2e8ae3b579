package console

import (
	"context"
	"errors"
	"net/http"
	stdsync "sync"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/fleet"
	"github.com/rxedge/agent/status"
)

// StoreQuarantineLimit is how many quarantined movements the store page
// lists (the oldest first), as `hq remote list` does by default.
const StoreQuarantineLimit = command.DefaultListLimit

type storeData struct {
	Frame
	Store    string
	Record   fleet.Record
	Status   *status.Status
	StatusEr string
	Judged   []status.Problem
	List     command.ListResult
	ListEr   string
	Problems []Problem
	ProbNote string
	Findings []Finding
	FindNote string
	Journal  []Entry
	JournEr  string
}

// storePage is one store: its line of the fleet, its status and
// quarantine asked of the store itself with signed commands, its
// lineage, its findings and problems, and what the console did there.
func (s *Server) storePage(w http.ResponseWriter, r *http.Request, rq *request) {
	store := r.PathValue("store")
	rec, ok := s.o.Index.Get(store)
	if !central.ValidStoreID(store) || !ok {
		s.errorPage(w, r, rq, http.StatusNotFound, "no such store in the fleet view")
		return
	}
	d := &storeData{Frame: Frame{Title: "Store " + store, Nav: "fleet"}, Store: store, Record: rec}
	s.askStore(r.Context(), d)
	s.storeRecords(r.Context(), d)
	s.render(w, r, rq, http.StatusOK, "store", d)
}

// askStore asks the store for its status and quarantine, both at once,
// each within CommandTimeout.
func (s *Server) askStore(ctx context.Context, d *storeData) {
	ctx, cancel := context.WithTimeout(ctx, s.o.CommandTimeout)
	defer cancel()
	var wg stdsync.WaitGroup
	wg.Go(func() {
		st, err := s.o.Client.Status(ctx, d.Store)
		if err != nil {
			d.StatusEr = commandError(err)
			return
		}
		d.Status = st
		d.Judged = st.Judge(status.PlainThresholds(0))
	})
	wg.Go(func() {
		res, err := s.o.Client.List(ctx, d.Store, command.ListArgs{Limit: StoreQuarantineLimit})
		if err != nil {
			d.ListEr = commandError(err)
			return
		}
		d.List = res
	})
	wg.Wait()
}

// storeRecords reads what hq keeps about the store.
func (s *Server) storeRecords(ctx context.Context, d *storeData) {
	if s.o.Problems == nil {
		d.ProbNote = "problems are not kept by this hq"
	} else if ps, err := s.o.Problems.Problems(ctx, ProblemQuery{Store: d.Store, Limit: 20}); err != nil {
		d.ProbNote = "problems could not be read: " + err.Error()
	} else {
		d.Problems = ps
	}
	if s.o.Findings == nil {
		d.FindNote = "findings are not kept by this hq (no PostgreSQL configured)"
	} else if fs, err := s.o.Findings.Findings(ctx, FindingQuery{Store: d.Store, Limit: 20}); err != nil {
		d.FindNote = "findings could not be read: " + err.Error()
	} else {
		d.Findings = fs
	}
	if es, err := s.o.Journal.Recent(ctx, d.Store, 20); err != nil {
		d.JournEr = err.Error()
	} else {
		d.Journal = es
	}
}

// commandError says why a command to a store failed, in words: the
// client's errors name the store and the command, never a payload.
func commandError(err error) string {
	var ce *command.Error
	switch {
	case errors.Is(err, fleet.ErrNoAgent):
		return "the store's agent is not connected to central"
	case errors.Is(err, context.DeadlineExceeded):
		return "the store did not answer in time"
	case errors.As(err, &ce):
		return ce.Code + ": " + ce.Msg
	}
	return err.Error()
}
