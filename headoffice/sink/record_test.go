package sink

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/movement"
	"github.com/rxedge/agent/testkit/natstest"
)

// TestParseRow feeds parseRow what a hostile store or a damaged archive
// could hold; each becomes a reject naming a header or field, and no
// reason carries a value.
func TestParseRow(t *testing.T) {
	good := mv("S0001", 7, payload{Type: "receive", Schedule: "CII", DEAForm222: "A1", RxRef: "RX-SECRET"})
	resign := func(m central.Message, body string) central.Message {
		m.Payload = []byte(body)
		m.Digest = fmt.Sprintf("%x", sha256.Sum256(m.Payload))
		return m
	}
	withField := func(field, v string) central.Message {
		p := payload{Type: "receive"}
		switch field {
		case "ndc":
			p.NDC = v
		case "note":
			p.Note = v
		case "rx_ref":
			p.RxRef = v
		case "quantity":
			p.Quantity = v
		case "occurred_at":
			p.OccurredAt = v
		case "type":
			p.Type = v
		}
		return mv("S0001", 7, p)
	}
	tests := []struct {
		name          string
		compact, full bool // only the compact (Message.Msg) or the full (older agents) form
		subject       string
		m             central.Message
		edit          func(h map[string][]string)
		want          string
	}{
		{name: "a movement", m: good},
		{name: "subject of no store", subject: "rx.ar.", m: good, want: "subject"},
		{name: "subject not a store id", subject: "rx.ar.S 1", m: good, want: "subject"},
		{name: "another store in the header", m: good, edit: func(h map[string][]string) { h[central.HeaderStore] = []string{"S0002"} }, want: "header Rx-Store"},
		{name: "no sequence", m: good, edit: func(h map[string][]string) { delete(h, central.HeaderSeq) }, want: "header Rx-Seq"},
		{name: "sequence 0", m: good, edit: func(h map[string][]string) { h[central.HeaderSeq] = []string{"0"} }, want: "header Rx-Seq"},
		{name: "no msg id", m: good, edit: func(h map[string][]string) { delete(h, central.HeaderMsgID) }, want: "header Nats-Msg-Id"},
		{name: "upper-case key", m: good, edit: func(h map[string][]string) { h[central.HeaderMsgID] = []string{strings.ToUpper(good.Key) + "-x"} }, want: "header Nats-Msg-Id"},
		{name: "short digest", m: good, edit: func(h map[string][]string) { h[central.HeaderDigest] = []string{"abc"} }, want: "header Rx-Digest"},
		{name: "digest of other content", m: good, edit: func(h map[string][]string) { h[central.HeaderDigest] = []string{strings.Repeat("0", 64)} }, want: "payload digest"},
		{name: "full: key of another movement", full: true, m: good, edit: func(h map[string][]string) { h[central.HeaderMsgID] = []string{strings.Repeat("a", 32) + "-x"} }, want: "payload movement_id"},
		{name: "not json", m: resign(good, `{"movement_id":`), want: "payload json"},
		{name: "two documents", m: resign(good, string(good.Payload)+string(good.Payload)), want: "payload json"},
		{name: "unknown field", m: resign(good, `{"movement_id":"m-7","patient_name":"RX-SECRET"}`), want: "payload json"},
		{name: "invalid utf-8", m: resign(good, "{\"movement_id\":\"\xff\"}"), want: "payload encoding"},
		{name: "ndc too long for an index", m: withField("ndc", strings.Repeat("1", 5000)), want: "payload ndc"},
		{name: "note too long", m: withField("note", strings.Repeat("n", 1025)), want: "payload note"},
		{name: "rx_ref with a control character", m: withField("rx_ref", "RX\x01"), want: "payload rx_ref"},
		{name: "negative quantity", m: withField("quantity", "-1"), want: "payload quantity"},
		{name: "zero quantity", m: withField("quantity", "0.000"), want: "payload quantity"},
		{name: "exponent", m: withField("quantity", "1e3"), want: "payload quantity"},
		{name: "bad time", m: withField("occurred_at", "yesterday"), want: "payload occurred_at"},
		{name: "unknown type", m: withField("type", "steal"), want: "payload type"},
		{name: "too large", m: resign(good, `{"note":"`+strings.Repeat("x", movement.MaxCanonical)+`"}`), want: "payload size"},
		// The compact form has the digest in the message id only.
		{name: "compact: digest in the id cut short", compact: true, m: good, edit: func(h map[string][]string) { h[central.HeaderMsgID] = []string{good.Key + "-" + good.Digest[:32]} }, want: "header Nats-Msg-Id"},
		{name: "compact: digest in the id of other content", compact: true, m: good, edit: func(h map[string][]string) {
			h[central.HeaderMsgID] = []string{good.Key + "-" + strings.Repeat("0", 64)}
		}, want: "payload digest"},
		{name: "compact: key in the id of another movement", compact: true, m: good, edit: func(h map[string][]string) {
			h[central.HeaderMsgID] = []string{strings.Repeat("a", 32) + "-" + good.Digest}
		}, want: "payload movement_id"},
		// The full form (older agents, two years of the archive) has it
		// in Rx-Digest, and only 128 bits of it in the message id.
		{name: "full: a movement", full: true, m: good},
		{name: "full: no Rx-Digest", full: true, m: good, edit: func(h map[string][]string) { delete(h, central.HeaderDigest) }, want: "header Nats-Msg-Id"},
		{name: "full: Rx-Digest of other content", full: true, m: good, edit: func(h map[string][]string) { h[central.HeaderDigest] = []string{strings.Repeat("0", 64)} }, want: "payload digest"},
		{name: "full: another store", full: true, m: good, edit: func(h map[string][]string) { h[central.HeaderStore] = []string{"S0002"} }, want: "header Rx-Store"},
		{name: "full: no sequence", full: true, m: good, edit: func(h map[string][]string) { delete(h, central.HeaderSeq) }, want: "header Rx-Seq"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			msg := tc.m.Msg()
			if tc.full {
				msg = natstest.FullForm(tc.m, "CII")
			}
			h := map[string][]string(msg.Header)
			if tc.compact && (h[central.HeaderDigest] != nil || h[central.HeaderStore] != nil) {
				t.Fatalf("not the compact form: %v", h)
			}
			if tc.edit != nil {
				tc.edit(h)
			}
			subject := central.ArchiveSubject("S0001")
			if tc.subject != "" {
				subject = tc.subject
			}
			r := parseRow("RX_ARCHIVE", 3, time.Now(), subject, h, msg.Data)
			if r.Reject != tc.want {
				t.Fatalf("reject %q, want %q", r.Reject, tc.want)
			}
			if strings.Contains(r.Reject, "SECRET") || strings.Contains(r.Reject, "RX-") {
				t.Errorf("reject %q names a value", r.Reject)
			}
			if tc.want == "" && (r.Key != good.Key || r.Digest != good.Digest || r.Seq != 7 || r.M.DEAForm222 != "A1" || r.Store != "S0001" ||
				!r.EnqueuedAt.Equal(good.EnqueuedAt.Truncate(time.Microsecond))) {
				t.Errorf("row %+v", r)
			}
		})
	}
}

// TestParseRowRefusesWhatTheAgentWould: a payload whose digest, key and
// headers are in order, as an insider with a store's or central's
// credentials can publish it, but which the agent's own validation would
// have refused, is a reject naming the field: a date before 2000 or past
// the store's clock (year 0, year 10000), an NDC of no form, a DEA form
// on a movement of another schedule. The store's clock is central's
// archive time, or its Rx-Enqueued-At when that is later by at most a day.
func TestParseRowRefusesWhatTheAgentWould(t *testing.T) {
	archived := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return archived.Add(d).Format(time.RFC3339) }
	for _, tc := range []struct {
		name     string
		p        payload
		enqueued time.Time
		want     string
	}{
		{name: "year 0", p: payload{OccurredAt: "0000-01-01T00:00:00Z"}, want: "payload occurred_at"},
		{name: "year 10000", p: payload{OccurredAt: "9999-12-31T23:00:00-05:00"}, want: "payload occurred_at"},
		{name: "year 10000 with a forged enqueue time", p: payload{OccurredAt: "9999-12-31T23:00:00-05:00"},
			enqueued: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC), want: "payload occurred_at"},
		{name: "before 2000", p: payload{OccurredAt: "1999-12-31T23:59:59Z"}, want: "payload occurred_at"},
		{name: "more than a day after the archive", p: payload{OccurredAt: at(25 * time.Hour)}, want: "payload occurred_at"},
		{name: "within a day of the archive", p: payload{OccurredAt: at(23 * time.Hour)}},
		{name: "a store clock ahead of central's", p: payload{OccurredAt: at(40 * time.Hour)}, enqueued: archived.Add(20 * time.Hour)},
		{name: "a store clock too far ahead", p: payload{OccurredAt: at(50 * time.Hour)}, enqueued: archived.Add(30 * time.Hour), want: "payload occurred_at"},
		{name: "an ndc of no form", p: payload{NDC: "12345"}, want: "payload ndc"},
		{name: "a dea form on schedule III", p: payload{Schedule: "CIII", DEAForm222: "X1"}, want: "payload dea_form_222"},
		{name: "an expiry that is no date", p: payload{Expires: "soon"}, want: "payload expires"},
		{name: "a movement id with spaces around", p: payload{MovementID: " m-1 "}, want: "payload movement_id"},
		{name: "too many integer digits", p: payload{Quantity: "1234567890123"}, want: "payload quantity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := mv("S0001", 7, tc.p)
			m.EnqueuedAt = tc.enqueued
			msg := m.Msg()
			r := parseRow("RX_ARCHIVE", 3, archived, central.ArchiveSubject("S0001"), msg.Header, msg.Data)
			if r.Reject != tc.want {
				t.Fatalf("reject %q, want %q", r.Reject, tc.want)
			}
			if tc.want == "" && (r.Key != m.Key || r.OccurredAt.IsZero()) {
				t.Errorf("row %+v", r)
			}
		})
	}
	// A store's own payload without store_id is not what its agent sends.
	m := mv("S0001", 7, payload{})
	m.Payload = []byte(strings.Replace(string(m.Payload), `"store_id":"S0001",`, "", 1))
	m.Digest = fmt.Sprintf("%x", sha256.Sum256(m.Payload))
	msg := m.Msg()
	if r := parseRow("RX_ARCHIVE", 3, archived, central.ArchiveSubject("S0001"), msg.Header, msg.Data); r.Reject != "payload store_id" {
		t.Errorf("no store_id: reject %q", r.Reject)
	}
}
