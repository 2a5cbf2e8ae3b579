package audit

import (
	"crypto/rand"
	"encoding/hex"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/rxedge/agent/central"
)

// unhex reads what hex.DecodeString reads, in either case, and refuses
// what it refuses, without allocating.
func TestUnhex(t *testing.T) {
	cases := []string{"00ff10ab", "ABCDEF01", "aBcD0f1e", "ZZ000000", "0g000000", "abcdef0", "abcdef012", "", "0x000000", "12 45678"}
	for i := 0; i < 200; i++ {
		var b [4]byte
		rand.Read(b[:])
		s := []byte(hex.EncodeToString(b[:]))
		s[i%8] = "0aF:g/ \xff"[i%8]
		cases = append(cases, string(s))
	}
	for _, s := range cases {
		var d [4]byte
		ok := unhex(d[:], s)
		want, err := hex.DecodeString(s)
		if ok != (err == nil && len(want) == 4) || ok && string(want) != string(d[:]) {
			t.Errorf("%q: %v %x, hex.DecodeString %x %v", s, ok, d, want, err)
		}
	}
	var d [32]byte
	s := hex.EncodeToString(make([]byte, 32))
	if n := testing.AllocsPerRun(100, func() { unhex(d[:], s) }); n != 0 {
		t.Errorf("unhex allocates %v times", n)
	}
}

// leafOf reads a movement's leaf from its headers, in the compact form
// (the digest in the message id) and the full one (Rx-Digest).
func TestLeafOf(t *testing.T) {
	key, digest := "0123456789abcdef0123456789ABCDEF", "ab"+hex.EncodeToString(make([]byte, 31))
	compact := nats.Header{}
	compact.Set(central.HeaderMsgID, central.MsgID(key, digest))
	compact.Set(central.HeaderSeq, "42")
	full := nats.Header{}
	full.Set(central.HeaderMsgID, key+"-"+digest[:16]) // the full form: part of the digest in the id
	full.Set(central.HeaderDigest, digest)
	full.Set(central.HeaderSeq, "42")
	for _, h := range []nats.Header{compact, full} {
		l, ok := leafOf(h)
		if !ok || l.Seq != 42 || hex.EncodeToString(l.Key[:]) != "0123456789abcdef0123456789abcdef" || hex.EncodeToString(l.Digest[:]) != digest {
			t.Errorf("leafOf(%v) = %x %v", h, l, ok)
		}
	}
	for _, edit := range []func(nats.Header){
		func(h nats.Header) { h.Set(central.HeaderSeq, "0") },
		func(h nats.Header) { h.Set(central.HeaderSeq, "x") },
		func(h nats.Header) { h.Set(central.HeaderMsgID, "nothex"+key[6:]+"-"+digest) },
		func(h nats.Header) { h.Set(central.HeaderMsgID, key+"-"+digest[1:]) },
	} {
		h := nats.Header{}
		for k, v := range compact {
			h[k] = v
		}
		edit(h)
		if l, ok := leafOf(h); ok {
			t.Errorf("leafOf(%v) = %x, want refused", h, l)
		}
	}
}
