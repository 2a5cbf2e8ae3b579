package natstest

import (
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
)

// FullForm is m as agents before the compact form published it (and as
// central's archive keeps two years of it): the first 128 bits of the
// digest in Nats-Msg-Id and the whole digest in Rx-Digest, Rx-Store,
// Rx-Schedule when schedule is set, Rx-Enqueued-At in RFC 3339 and the
// lineage headers on every movement of a continued file. Tests of the
// readers publish it beside central.Message.Msg's compact form.
func FullForm(m central.Message, schedule string) *nats.Msg {
	msg := nats.NewMsg(central.Subject(m.Store, m.Key))
	digest := m.Digest
	if len(digest) > 32 {
		digest = digest[:32]
	}
	msg.Header.Set(central.HeaderMsgID, m.Key+"-"+digest)
	msg.Header.Set(central.HeaderExpectLast, "0")
	msg.Header.Set(central.HeaderDigest, m.Digest)
	msg.Header.Set(central.HeaderStore, m.Store)
	msg.Header.Set(central.HeaderSeq, strconv.FormatUint(m.Seq, 10))
	if schedule != "" {
		msg.Header.Set(central.HeaderSchedule, schedule)
	}
	msg.Header.Set(central.HeaderEnqueuedAt, m.EnqueuedAt.UTC().Format(time.RFC3339Nano))
	if m.File.ID != "" {
		msg.Header.Set(central.HeaderFile, m.File.ID)
	}
	if m.File.Continues() {
		if m.File.Prev != "" {
			msg.Header.Set(central.HeaderFilePrev, m.File.Prev)
		}
		msg.Header.Set(central.HeaderFileBase, strconv.FormatUint(m.File.Base, 10))
		msg.Header.Set(central.HeaderFileOrigin, m.File.Origin)
	}
	msg.Data = m.Payload
	return msg
}
