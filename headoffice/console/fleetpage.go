package console

import (
	"net/http"
	"net/url"
	"slices"
	"strconv"

	"github.com/rxedge/agent/headoffice/fleet"
)

// FleetPageSize is the stores on one page of the fleet.
const FleetPageSize = 100

// fleetStates are the states and conditions the fleet page filters by,
// the worst first.
var fleetStates = []string{
	fleet.Unverifiable, fleet.Missing, fleet.Silent, fleet.Stale, fleet.Attention, fleet.Unknown, fleet.OK,
	fleet.CondOffline, fleet.CondPaused, fleet.CondQuarantining, fleet.CondLineageHeld,
	fleet.CondFileRestored, fleet.CondFileReplaced, fleet.CondSyncing,
}

// fleetColumns are the sortable columns: their sort order and title.
var fleetColumns = []struct{ Sort, Title string }{
	{fleet.SortStore, "Store"}, {fleet.SortProblems, "State"}, {fleet.SortLastSeen, "Last heartbeat"},
	{fleet.SortPending, "Pending"}, {fleet.SortOldestPending, "Oldest pending"}, {fleet.SortQuarantined, "Quarantined"},
	{fleet.SortFreeDisk, "Free disk"}, {fleet.SortVersion, "Version"},
}

type fleetRow struct {
	fleet.Record
	Known, Countersigned bool
	Findings             int
}

type column struct {
	Title, Link string
	Sorted      bool
	Num         bool
}

type fleetData struct {
	Frame
	Q                       fleet.Query
	Page                    fleet.Page
	Rows                    []fleetRow
	Columns                 []column
	States                  []string
	StateLinks              map[string]string
	Prev, Next              string
	From, To                int
	FindingsNote            string
	Ready                   bool
	Regions, Tags, Versions []string
	BulkLink                string
}

// fleetQuery reads the fleet page's filters, order and page from its
// query string.
func fleetQuery(v url.Values) fleet.Query {
	q := fleet.Query{
		State: v.Get("state"), Region: v.Get("region"), Tag: v.Get("tag"), Version: v.Get("version"),
		Prefix: v.Get("q"), Sort: v.Get("sort"), Desc: v.Get("desc") == "1", Limit: FleetPageSize,
	}
	if n, err := strconv.Atoi(v.Get("page")); err == nil && n > 1 && n < 1_000_000 {
		q.Offset = (n - 1) * FleetPageSize
	}
	return q
}

// values is q as a query string's values, without its page.
func values(q fleet.Query) url.Values {
	v := url.Values{}
	for k, s := range map[string]string{"state": q.State, "region": q.Region, "tag": q.Tag, "version": q.Version, "q": q.Prefix, "sort": q.Sort} {
		if s != "" {
			v.Set(k, s)
		}
	}
	if q.Desc {
		v.Set("desc", "1")
	}
	return v
}

// fleetPage is every store in one table, from the index: filtered,
// sorted (problems first by default) and paged.
func (s *Server) fleetPage(w http.ResponseWriter, r *http.Request, rq *request) {
	q := fleetQuery(r.URL.Query())
	p := s.o.Index.Query(q)
	d := &fleetData{Frame: Frame{Title: "Fleet", Nav: "fleet"}, Q: q, Page: p, States: fleetStates, StateLinks: map[string]string{}}
	d.Regions, d.Tags, d.Versions = p.Regions, p.Tags, p.Versions
	select {
	case <-s.o.Index.Ready():
		d.Ready = true
	default:
	}
	counts := s.findingCounts(r, p.Records, d)
	for _, rec := range p.Records {
		row := fleetRow{Record: rec, Findings: counts[rec.Store]}
		row.Known, row.Countersigned = rec.Countersigned(s.o.Index.Following())
		d.Rows = append(d.Rows, row)
	}
	for _, c := range fleetColumns {
		v := values(q)
		v.Set("sort", c.Sort)
		sorted := q.Sort == c.Sort || (q.Sort == "" && c.Sort == fleet.SortProblems)
		v.Del("desc")
		if sorted && !q.Desc {
			v.Set("desc", "1")
		}
		d.Columns = append(d.Columns, column{Title: c.Title, Link: "/fleet?" + v.Encode(), Sorted: sorted, Num: c.Sort != fleet.SortStore && c.Sort != fleet.SortProblems && c.Sort != fleet.SortVersion && c.Sort != fleet.SortLastSeen})
	}
	for _, st := range fleetStates {
		v := values(q)
		v.Set("state", st)
		d.StateLinks[st] = "/fleet?" + v.Encode()
	}
	d.From, d.To = q.Offset+1, q.Offset+len(p.Records)
	page := q.Offset/FleetPageSize + 1
	if q.Offset > 0 {
		v := values(q)
		v.Set("page", strconv.Itoa(page-1))
		d.Prev = "/fleet?" + v.Encode()
	}
	if q.Offset+len(p.Records) < p.Matched {
		v := values(q)
		v.Set("page", strconv.Itoa(page+1))
		d.Next = "/fleet?" + v.Encode()
	}
	bv := values(q)
	bv.Del("sort")
	bv.Del("desc")
	d.BulkLink = "/bulk?" + bv.Encode()
	s.render(w, r, rq, http.StatusOK, "fleet", d)
}

// findingCounts are the findings of the page's stores, when hq keeps
// findings; otherwise the page says why the column is empty.
func (s *Server) findingCounts(r *http.Request, recs []fleet.Record, d *fleetData) map[string]int {
	if s.o.Findings == nil {
		d.FindingsNote = "findings are not kept by this hq (no PostgreSQL configured)"
		return nil
	}
	ids := make([]string, len(recs))
	for i, rec := range recs {
		ids[i] = rec.Store
	}
	counts, err := s.o.Findings.CountByStore(r.Context(), slices.Clip(ids))
	if err != nil {
		d.FindingsNote = "findings could not be read: " + err.Error()
		return nil
	}
	return counts
}
