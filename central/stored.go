package central

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// ServerHeaders are the headers central adds to a direct get's answer to
// say where it holds the record: its stream, subject, stream sequence and
// the time it was stored. A publisher may put the same headers on what it
// stores, and central keeps them: an answer then carries the record's
// values first and central's own last. So a reader takes the last value
// of each (ReadStored), and a record that carries any of them itself was
// written to pass for another record, or is a JetStream answer aimed at a
// stream's subject as a reply subject.
var ServerHeaders = []string{jetstream.StreamHeader, jetstream.SubjectHeader, jetstream.SequenceHeader, jetstream.TimeStampHeaer}

// Stored is where central holds a record, as its direct-get answer says.
type Stored struct {
	Stream, Subject string
	Seq             uint64
	// Time is when central stored it (zero when the answer does not say).
	Time time.Time
	// Reflected says the record carries ServerHeaders of its own:
	// nothing it says of itself is to be taken as a store's.
	Reflected bool
}

// ReadStored reads, from the headers of a direct get's answer, what
// central says of the record: the last value of each of ServerHeaders,
// which is central's own (it appends its values after the record's).
// It is false when the stream, subject or sequence is missing or does
// not parse: an answer that is not a stored record's.
func ReadStored(h nats.Header) (Stored, bool) {
	last := func(k string) string {
		if v := h.Values(k); len(v) > 0 {
			return v[len(v)-1]
		}
		return ""
	}
	var s Stored
	var err error
	s.Stream, s.Subject = last(jetstream.StreamHeader), last(jetstream.SubjectHeader)
	s.Seq, err = strconv.ParseUint(last(jetstream.SequenceHeader), 10, 64)
	if err != nil || s.Stream == "" || s.Subject == "" {
		return Stored{}, false
	}
	if t, err := time.Parse(time.RFC3339Nano, last(jetstream.TimeStampHeaer)); err == nil {
		s.Time = t
	}
	for _, k := range ServerHeaders {
		if len(h.Values(k)) > 1 {
			s.Reflected = true
		}
	}
	return s, true
}

// CarriesServerHeaders reports whether a record's own headers, as a
// consumer delivers them (central adds nothing), hold any of
// ServerHeaders: a record written to pass for another, or a reflected
// JetStream answer.
func CarriesServerHeaders(h nats.Header) bool {
	for _, k := range ServerHeaders {
		if len(h.Values(k)) > 0 {
			return true
		}
	}
	return false
}
