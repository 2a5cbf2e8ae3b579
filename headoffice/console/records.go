package console

import (
	"context"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/rxedge/agent/central"
)

// Limits of a lookup.
const (
	// MaxLookupRows bounds the movements a lookup lists.
	MaxLookupRows = 200
	// MaxLookupValue bounds what a lookup is given.
	MaxLookupValue = 128
	// ProofTimeout bounds the making of one proof (it reads the store's
	// archive up to the checkpoint that covers the movement).
	ProofTimeout = 5 * time.Minute
)

var ndcPattern = regexp.MustCompile(`^[0-9-]{10,13}$`)

type recordsData struct {
	Frame
	Note    string
	By      string
	Store   string
	Rows    []Movement
	Error   string
	Results bool
}

// recordsPage is the movement lookup's form.
func (s *Server) recordsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d := &recordsData{Frame: Frame{Title: "Records", Nav: "records"}, By: "key"}
	if s.o.Records == nil {
		d.Note = "movement records need the sink's PostgreSQL, which this hq is not given"
	}
	s.render(w, r, rq, http.StatusOK, "records", d)
}

// recordsSearch looks movements up by key (with the store), by
// prescription reference, or by NDC (with the store), each through an
// index of the sink's tables. It is posted, not a query string, so that
// a prescription reference stays out of URLs, histories and logs, and it
// is never shown back; each lookup is journalled, without what was
// looked for.
func (s *Server) recordsSearch(w http.ResponseWriter, r *http.Request, rq *request) {
	d := &recordsData{Frame: Frame{Title: "Records", Nav: "records"}, By: r.PostForm.Get("by"), Results: true}
	if s.o.Records == nil {
		d.Note = "movement records need the sink's PostgreSQL, which this hq is not given"
		s.render(w, r, rq, http.StatusOK, "records", d)
		return
	}
	store, value := strings.TrimSpace(r.PostForm.Get("store")), strings.TrimSpace(r.PostForm.Get("value"))
	d.Store = store
	var why string
	switch {
	case len(value) == 0 || len(value) > MaxLookupValue:
		why = "give what to look for"
	case d.By != "rx_ref" && !central.ValidStoreID(store):
		why = "a lookup by key or NDC needs the store id (the sink's index starts with it)"
	case d.By == "key" && !keyPattern.MatchString(strings.ToLower(value)):
		why = "a movement key is 32 hex digits"
	case d.By == "ndc" && !ndcPattern.MatchString(value):
		why = "an NDC is 10 or 11 digits, with or without dashes"
	case d.By != "key" && d.By != "ndc" && d.By != "rx_ref":
		why = "look up by key, prescription reference or NDC"
	}
	if why != "" {
		d.Error = why
		s.render(w, r, rq, http.StatusBadRequest, "records", d)
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.CommandTimeout)
	defer cancel()
	if err := s.journalRead(ctx, rq, "lookup", store, "by "+d.By); err != nil {
		s.errorPage(w, r, rq, http.StatusServiceUnavailable, err.Error())
		return
	}
	d.Rows, d.Error = s.lookup(ctx, d.By, store, value)
	s.render(w, r, rq, http.StatusOK, "records", d)
}

// lookup runs one lookup; its error is in words.
func (s *Server) lookup(ctx context.Context, by, store, value string) ([]Movement, string) {
	var rows []Movement
	var err error
	switch by {
	case "key":
		var m Movement
		if m, err = s.o.Records.ByKey(ctx, store, strings.ToLower(value)); err == nil {
			rows = []Movement{m}
		}
	case "rx_ref":
		rows, err = s.o.Records.ByRxRef(ctx, value, MaxLookupRows)
	case "ndc":
		rows, err = s.o.Records.ByNDC(ctx, store, value, MaxLookupRows)
	}
	switch {
	case errors.Is(err, ErrNoMovement):
		return nil, "no such movement in the sink"
	case err != nil:
		return nil, "the lookup failed: " + err.Error()
	}
	return rows, ""
}

// journalRead records that a user read records: access to the records is
// on record (45 CFR 164.312(b)). Nothing is shown unless it is.
func (s *Server) journalRead(ctx context.Context, rq *request, action, store, detail string) error {
	e := Entry{At: s.o.Clock(), User: rq.user.ID, Roles: rq.user.Roles, Action: action, Outcome: ActionDone, Detail: detail}
	if store != "" {
		e.Stores = []string{store}
	}
	if err := s.o.Journal.Record(ctx, e); err != nil {
		return errors.New("the read could not be recorded in hq's journal, so nothing is shown: " + err.Error())
	}
	return nil
}

type movementData struct {
	Frame
	M        Movement
	Error    string
	CanProve bool
}

// movementPage is one movement as the sink holds it, with the link to
// its inclusion proof.
func (s *Server) movementPage(w http.ResponseWriter, r *http.Request, rq *request) {
	store, key := r.PathValue("store"), r.PathValue("key")
	if !central.ValidStoreID(store) || !keyPattern.MatchString(key) || s.o.Records == nil {
		s.errorPage(w, r, rq, http.StatusNotFound, "no such movement (or no sink configured)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.o.CommandTimeout)
	defer cancel()
	if err := s.journalRead(ctx, rq, "movement", store, "key "+key); err != nil {
		s.errorPage(w, r, rq, http.StatusServiceUnavailable, err.Error())
		return
	}
	m, err := s.o.Records.ByKey(ctx, store, key)
	d := &movementData{Frame: Frame{Title: "Movement " + key, Nav: "records"}, M: m, CanProve: s.o.Prover != nil}
	switch {
	case errors.Is(err, ErrNoMovement):
		s.errorPage(w, r, rq, http.StatusNotFound, "no such movement in the sink")
		return
	case err != nil:
		d.Error = "the lookup failed: " + err.Error()
	}
	s.render(w, r, rq, http.StatusOK, "movement", d)
}

// proofDownload writes the inspector's proof of a movement as a file.
func (s *Server) proofDownload(w http.ResponseWriter, r *http.Request, rq *request) {
	store, key := r.PathValue("store"), r.PathValue("key")
	if !central.ValidStoreID(store) || !keyPattern.MatchString(key) || s.o.Prover == nil {
		s.errorPage(w, r, rq, http.StatusNotFound, "no proof can be made here (no archive reader configured, or no such movement)")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), ProofTimeout)
	defer cancel()
	if err := s.journalRead(ctx, rq, "proof", store, "key "+key); err != nil {
		s.errorPage(w, r, rq, http.StatusServiceUnavailable, err.Error())
		return
	}
	b, err := s.o.Prover.Prove(ctx, store, key)
	if err != nil {
		s.errorPage(w, r, rq, http.StatusBadGateway, "the proof could not be made: "+err.Error())
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Disposition", `attachment; filename="proof-`+store+`-`+key+`.json"`)
	w.Write(b)
}

type listData struct {
	Frame
	Note     string
	Problems []Problem
	Findings []Finding
	Journal  []Entry
}

// problemsPage lists the fleet watch's problems: the open ones first.
func (s *Server) problemsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d := &listData{Frame: Frame{Title: "Problems", Nav: "problems"}}
	if s.o.Problems == nil {
		d.Note = "problems are kept by hq's fleet watch, which does not run with this console"
	} else if ps, err := s.o.Problems.Problems(r.Context(), ProblemQuery{Limit: 500}); err != nil {
		d.Note = "problems could not be read: " + err.Error()
	} else {
		d.Problems = ps
	}
	s.render(w, r, rq, http.StatusOK, "problems", d)
}

// findingsPage lists the findings of verification, the witness and
// reconciliation, newest first.
func (s *Server) findingsPage(w http.ResponseWriter, r *http.Request, rq *request) {
	store := r.URL.Query().Get("store")
	if store != "" && !central.ValidStoreID(store) {
		store = ""
	}
	d := &listData{Frame: Frame{Title: "Findings", Nav: "findings"}}
	if s.o.Findings == nil {
		d.Note = "findings are kept in hq's PostgreSQL, which this console is not given"
	} else if fs, err := s.o.Findings.Findings(r.Context(), FindingQuery{Store: store, Limit: 500}); err != nil {
		d.Note = "findings could not be read: " + err.Error()
	} else {
		d.Findings = fs
	}
	s.render(w, r, rq, http.StatusOK, "findings", d)
}

// journalPage lists hq's journal of the console, newest first.
func (s *Server) journalPage(w http.ResponseWriter, r *http.Request, rq *request) {
	d := &listData{Frame: Frame{Title: "Journal", Nav: "journal"}}
	if es, err := s.o.Journal.Recent(r.Context(), "", 200); err != nil {
		d.Note = "the journal could not be read: " + err.Error()
	} else {
		d.Journal = es
	}
	s.render(w, r, rq, http.StatusOK, "journal", d)
}
