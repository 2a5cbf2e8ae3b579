package console

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestSessionsOfOneUserEndNoOther: a viewer that sends requests without
// the session cookie (each starts a session) past every bound ends only
// its own oldest sessions: an operator's session, and the token its open
// form carries, still hold.
func TestSessionsOfOneUserEndNoOther(t *testing.T) {
	ss := &sessions{byID: map[string]*session{}, logins: map[string]time.Time{}, ttl: time.Hour, clock: time.Now}
	rec := httptest.NewRecorder()
	op := ss.start(rec, user{ID: "ops-anna", Roles: []string{RoleOperator}})
	req := httptest.NewRequest("GET", "/", nil)
	for _, c := range rec.Result().Cookies() {
		req.AddCookie(c)
	}
	for range MaxSessions + 50 {
		ss.start(httptest.NewRecorder(), user{ID: "viewer-bob", Roles: []string{RoleViewer}})
	}
	if got := ss.get(req); got != op || !csrfOK(got, op.csrf) {
		t.Fatalf("the operator's session ended under another user's requests")
	}
	var bobs int
	for _, s := range ss.byID {
		if s.user.ID == "viewer-bob" {
			bobs++
		}
	}
	if bobs != MaxSessionsPerUser {
		t.Errorf("the viewer holds %d sessions, want %d", bobs, MaxSessionsPerUser)
	}
}
