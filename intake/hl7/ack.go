package hl7

import (
	"fmt"
	"strings"
	"sync/atomic"
	"time"
)

// Acknowledgement codes (MSA-1, original mode).
const (
	AA = "AA" // stored in an fsynced commit, or already held
	AE = "AE" // a dispense failed validation; nothing of the message stored
	AR = "AR" // unsupported or malformed message, or the agent cannot store now
)

// ackHeader is what an acknowledgement echoes from the message it answers.
type ackHeader struct {
	sendingApp, sendingFacility string // MSH-3, MSH-4, become MSH-5, MSH-6
	trigger                     string // MSH-9.2
	controlID                   string // MSH-10, echoed in MSA-2
	processing                  string // MSH-11
	version                     string // MSH-12
}

// header reads what an acknowledgement echoes; a value it cannot decode
// is left empty.
func header(m *Message) ackHeader {
	msh := m.MSH()
	get := func(f, c int) string {
		v, err := m.Get(msh, f, 1, c, 0)
		if err != nil {
			return ""
		}
		return v
	}
	return ackHeader{
		sendingApp: get(3, 1), sendingFacility: get(4, 1),
		trigger: get(9, 2), controlID: get(10, 0), processing: get(11, 1), version: get(12, 1),
	}
}

var ackSeq atomic.Uint64

// buildAck writes an acknowledgement in the standard encoding: MSH, MSA
// (MSA-2 echoing MSH-10) and one ERR per error, each naming a place
// (ERR-2), a table 0357 code (ERR-3) and a text that never holds a value
// from the message (ERR-8).
func buildAck(h ackHeader, code, store string, now time.Time, errs []*Error) []byte {
	e := Standard
	trig := h.trigger
	if trig == "" {
		trig = "O13"
	}
	ver := h.version
	if ver == "" {
		ver = "2.5.1"
	}
	proc := h.processing
	if proc == "" {
		proc = "P"
	}
	id := fmt.Sprintf("RX%d%06d", now.Unix(), ackSeq.Add(1)%1000000)
	var b strings.Builder
	fmt.Fprintf(&b, "MSH|^~\\&|RXEDGE|%s|%s|%s|%s||ACK^%s^ACK|%s|%s|%s\r",
		e.Encode(store), e.Encode(h.sendingApp), e.Encode(h.sendingFacility), now.Format("20060102150405-0700"),
		e.Encode(trig), id, e.Encode(proc), e.Encode(ver))
	text := ""
	if len(errs) > 0 {
		text = errs[0].Msg
	}
	fmt.Fprintf(&b, "MSA|%s|%s|%s\r", code, e.Encode(h.controlID), e.Encode(truncate(text, 80)))
	for _, er := range errs {
		l := er.Loc
		erl := e.Encode(l.Segment)
		if l.Seq > 0 {
			erl += fmt.Sprintf("^%d", l.Seq)
			if l.Field > 0 {
				erl += fmt.Sprintf("^%d^%d", l.Field, max(l.Repetition, 1))
				if l.Component > 0 {
					erl += fmt.Sprintf("^%d", l.Component)
					if l.Sub > 0 {
						erl += fmt.Sprintf("^%d", l.Sub)
					}
				}
			}
		}
		fmt.Fprintf(&b, "ERR||%s|%s^%s^HL70357|E||||%s\r", erl, er.Code, codeText(er.Code), e.Encode(l.String()+": "+er.Msg))
	}
	return []byte(b.String())
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

func codeText(code string) string {
	switch code {
	case CodeSegmentSequence:
		return "Segment sequence error"
	case CodeRequiredMissing:
		return "Required field missing"
	case CodeDataType:
		return "Data type error"
	case CodeTableValue:
		return "Table value not found"
	case CodeUnsupportedType:
		return "Unsupported message type"
	case CodeDuplicateKey:
		return "Duplicate key identifier"
	}
	return "Application internal error"
}
