package console

import (
	"context"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/central/command"
	"github.com/rxedge/agent/headoffice/fleet"
)

// MaxReasonBytes bounds an action's reason text.
const MaxReasonBytes = 500

var (
	keyPattern    = regexp.MustCompile(`^[0-9a-f]{32}$`)
	reasonPattern = regexp.MustCompile(`^[a-z_]{1,32}(:[a-z_]{1,32})?$`)
)

// storeResult is what one store did with an action.
type storeResult struct {
	Store    string
	Redriven int
	Keys     []string
	MoreKeys int
	NotFound int
	// Err says why the store did not do it (not connected, refused,
	// failed, not sent in time); "" when it did.
	Err string
}

type resultData struct {
	Frame
	Action  string
	Reason  string
	Results []storeResult
	Done    int
	Failed  []storeResult
	Keys    int
	Journal string
}

// redriveArgs are the arguments of a redrive asked by u of a store whose
// line is rec: the user rides in the signed arguments when the store's
// agent reads them, else in the reason text, which every agent journals.
func redriveArgs(rec fleet.Record, u user, sel command.Selection, reason string, spread time.Duration) command.RedriveArgs {
	a := command.RedriveArgs{Selection: sel, ReasonText: reason}
	if spread > 0 {
		a.Spread = spread.String()
	}
	if rec.Summary != nil && slices.Contains(rec.Summary.Features, command.FeatureRedriveActor) {
		a.Actor = u.Actor()
	} else {
		a.ReasonText = reason + " [by " + u.Actor() + "]"
	}
	return a
}

// actionReason reads and checks the form's reason text.
func actionReason(r *http.Request) (string, string) {
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	switch {
	case reason == "":
		return "", "a reason is required: say why the movements are sent again (it is recorded at each store and in hq's journal)"
	case len(reason) > MaxReasonBytes:
		return "", fmt.Sprintf("the reason is longer than %d bytes", MaxReasonBytes)
	}
	return reason, ""
}

// redriveStore redrives the selected quarantined movements of one store.
func (s *Server) redriveStore(w http.ResponseWriter, r *http.Request, rq *request) {
	store := r.PathValue("store")
	rec, ok := s.o.Index.Get(store)
	if !central.ValidStoreID(store) || !ok {
		s.errorPage(w, r, rq, http.StatusNotFound, "no such store in the fleet view")
		return
	}
	keys := r.PostForm["key"]
	reason, why := actionReason(r)
	switch {
	case len(keys) == 0:
		why = "select the movements to redrive"
	case len(keys) > command.MaxListLimit:
		why = fmt.Sprintf("at most %d movements at once", command.MaxListLimit)
	case slices.ContainsFunc(keys, func(k string) bool { return !keyPattern.MatchString(k) }):
		why = "a selected key is not a movement key"
	}
	if why != "" {
		s.errorPage(w, r, rq, http.StatusBadRequest, why)
		return
	}
	entry := Entry{At: s.o.Clock(), User: rq.user.ID, Roles: rq.user.Roles, Action: "redrive", Outcome: ActionAsked, Stores: []string{store}, Keys: len(keys), Reason: reason}
	if err := s.o.Journal.Record(r.Context(), entry); err != nil {
		s.errorPage(w, r, rq, http.StatusServiceUnavailable, "the action could not be recorded in hq's journal, so nothing was sent: "+err.Error())
		return
	}
	args := redriveArgs(rec, rq.user, command.Selection{Keys: keys}, reason, 0)
	res := s.redriveOne(r.Context(), store, args)
	d := &resultData{Frame: Frame{Title: "Redrive at " + store, Nav: "fleet"}, Action: "redrive", Reason: reason}
	s.finish(r.Context(), d, entry, []storeResult{res})
	s.render(w, r, rq, http.StatusOK, "redrive", d)
}

// redriveOne sends one signed redrive, signed as it is sent, within
// CommandTimeout.
func (s *Server) redriveOne(ctx context.Context, store string, a command.RedriveArgs) storeResult {
	ctx, cancel := context.WithTimeout(ctx, s.o.CommandTimeout)
	defer cancel()
	out := storeResult{Store: store}
	res, err := s.o.Client.Redrive(ctx, store, a)
	out.Redriven, out.Keys, out.MoreKeys, out.NotFound = res.Redriven, res.Keys, res.MoreKeys, len(res.NotFound)
	if err != nil {
		out.Err = commandError(err)
	}
	return out
}

// finish tallies the results and journals how the action ended.
func (s *Server) finish(ctx context.Context, d *resultData, asked Entry, results []storeResult) {
	d.Results = results
	var failed []string
	for _, res := range results {
		d.Keys += res.Redriven
		if res.Err != "" {
			d.Failed = append(d.Failed, res)
			failed = append(failed, res.Store)
		} else {
			d.Done++
		}
	}
	e := asked
	e.At, e.Outcome, e.Keys = s.o.Clock(), ActionDone, d.Keys
	switch {
	case len(failed) == len(results):
		e.Outcome = ActionFailed
	case len(failed) > 0:
		e.Outcome = ActionPartial
	}
	e.Detail = fmt.Sprintf("%d store(s) done, %d redriven", d.Done, d.Keys)
	if len(failed) > 0 {
		if len(failed) > 50 {
			failed = append(failed[:50], fmt.Sprintf("and %d more", len(failed)-50))
		}
		e.Detail += "; not done at " + strings.Join(failed, ", ")
	}
	if err := s.o.Journal.Record(ctx, e); err != nil {
		d.Journal = "the result could not be recorded in hq's journal: " + err.Error()
		s.o.Logger.Warn("CONSOLE_JOURNAL_FAILED", "action", e.Action, "error", err.Error())
	}
	s.o.Logger.Info("CONSOLE_ACTION", "user", asked.User, "action", asked.Action, "outcome", e.Outcome, "stores", len(results), "redriven", d.Keys)
}

type bulkData struct {
	Frame
	Q          fleet.Query
	Filter     string
	Rows       []fleet.Record
	Stores     string
	Total      uint64
	Controlled uint64
	TooMany    bool
	Max        int
	Spread     time.Duration
	Hidden     map[string]string
}

// bulkPreview shows the stores a bulk redrive would reach (those the
// fleet filters select that report quarantined movements) and how many
// each holds, with the form that runs it.
func (s *Server) bulkPreview(w http.ResponseWriter, r *http.Request, rq *request) {
	q := fleetQuery(r.URL.Query())
	filter := r.URL.Query().Get("reason")
	if filter != "" && !reasonPattern.MatchString(filter) {
		s.errorPage(w, r, rq, http.StatusBadRequest, "the quarantine reason is a class and a kind, e.g. permanent:too_large, or one of them")
		return
	}
	d := &bulkData{Frame: Frame{Title: "Bulk redrive", Nav: "bulk"}, Q: q, Filter: filter, Max: s.o.MaxBulkStores, Spread: s.o.BulkSpread, Hidden: map[string]string{}}
	var ids []string
	for _, id := range s.o.Index.Stores(q) {
		rec, ok := s.o.Index.Get(id)
		if !ok || rec.Summary == nil || rec.Summary.Quarantined == 0 {
			continue
		}
		d.Rows = append(d.Rows, rec)
		d.Total += rec.Summary.Quarantined
		d.Controlled += rec.Summary.QuarantinedControlled
		ids = append(ids, id)
	}
	d.TooMany = len(ids) > s.o.MaxBulkStores
	d.Stores = strings.Join(ids, " ")
	for k, v := range values(q) {
		d.Hidden[k] = v[0]
	}
	s.render(w, r, rq, http.StatusOK, "bulk", d)
}

// bulkRedrive redrives the quarantine of the stores the preview listed,
// at most BulkConcurrency at a time, each command signed as it is sent
// and each store's movements spread over BulkSpread, within
// BulkDeadline; every store's result is shown and the failures named.
func (s *Server) bulkRedrive(w http.ResponseWriter, r *http.Request, rq *request) {
	reason, why := actionReason(r)
	filter := r.PostForm.Get("filter")
	stores := strings.Fields(r.PostForm.Get("stores"))
	switch {
	case why != "":
	case filter != "" && !reasonPattern.MatchString(filter):
		why = "the quarantine reason is a class and a kind, e.g. permanent:too_large"
	case len(stores) == 0:
		why = "no store was selected"
	case len(stores) > s.o.MaxBulkStores:
		why = fmt.Sprintf("at most %d stores at once: narrow the filters", s.o.MaxBulkStores)
	}
	recs := make(map[string]fleet.Record, len(stores))
	for _, id := range stores {
		rec, ok := s.o.Index.Get(id)
		if why == "" && (!central.ValidStoreID(id) || !ok) {
			why = "a selected store is not in the fleet view"
		}
		recs[id] = rec
	}
	if why != "" {
		s.errorPage(w, r, rq, http.StatusBadRequest, why)
		return
	}
	slices.Sort(stores)
	stores = slices.Compact(stores)
	sel := command.Selection{All: true}
	if filter != "" {
		sel = command.Selection{Reason: filter}
	}
	entry := Entry{At: s.o.Clock(), User: rq.user.ID, Roles: rq.user.Roles, Action: "bulk_redrive", Outcome: ActionAsked, Stores: stores, Reason: reason, Detail: "selection " + selectionText(sel)}
	if err := s.o.Journal.Record(r.Context(), entry); err != nil {
		s.errorPage(w, r, rq, http.StatusServiceUnavailable, "the action could not be recorded in hq's journal, so nothing was sent: "+err.Error())
		return
	}
	results := s.fanOut(r.Context(), stores, func(ctx context.Context, id string) storeResult {
		return s.redriveOne(ctx, id, redriveArgs(recs[id], rq.user, sel, reason, s.o.BulkSpread))
	})
	d := &resultData{Frame: Frame{Title: "Bulk redrive", Nav: "bulk"}, Action: "bulk redrive", Reason: reason}
	s.finish(r.Context(), d, entry, results)
	s.render(w, r, rq, http.StatusOK, "redrive", d)
}

func selectionText(sel command.Selection) string {
	if sel.Reason != "" {
		return "reason=" + sel.Reason
	}
	return "all"
}

// fanOut runs do for each store, at most BulkConcurrency at a time,
// within BulkDeadline: a store not reached in time is reported as not
// sent.
func (s *Server) fanOut(ctx context.Context, stores []string, do func(context.Context, string) storeResult) []storeResult {
	ctx, cancel := context.WithTimeout(ctx, s.o.BulkDeadline)
	defer cancel()
	out := make([]storeResult, len(stores))
	var g errgroup.Group
	g.SetLimit(s.o.BulkConcurrency)
	for i, id := range stores {
		g.Go(func() error {
			if ctx.Err() != nil {
				out[i] = storeResult{Store: id, Err: "not sent: the action's time ran out"}
				return nil
			}
			out[i] = do(ctx, id)
			return nil
		})
	}
	g.Wait()
	return out
}
