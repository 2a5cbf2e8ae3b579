package queue

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// The key index maps each key the file holds to its entry (keyEntry). A
// bbolt entry costs 16 bytes of page header besides its key and value,
// as much as a key's whole entry, and keys arrive in random order, which
// leaves B-tree pages about 70% full: one bbolt entry per key cost about
// 52 bytes. The index instead keeps the keys in groups, one bbolt entry
// per group, keyed by a 2-byte group number: a million keys make groups
// of about 15, and a key costs about 21 bytes and its share of the
// group's entry.
//
// A key's group is two bytes of SHA-256 over the file's own random
// secret (meta "key_secret") and the key. Keys are hashes of what the
// dispensing system sends, so without the secret a sender could choose
// movement ids whose keys crowd into one group, and make every write to
// it slow.
//
// Group value: its members in key order, each the key (16), the entry's
// length (uvarint) and the entry.
const keyGroupBytes = 2

var (
	bucketKeysV3  = []byte("keys") // one bbolt entry per key, schema 3
	metaKeySecret = []byte("key_secret")
)

// keyIndex is the key index of one transaction.
type keyIndex struct {
	bk     *bolt.Bucket
	secret []byte
}

// newKeySecret makes a file's key secret, in meta, if it has none.
func newKeySecret(meta *bolt.Bucket) error {
	if meta.Get(metaKeySecret) != nil {
		return nil
	}
	s := make([]byte, 16)
	if _, err := rand.Read(s); err != nil {
		return err
	}
	return meta.Put(metaKeySecret, s)
}

// group is the bbolt key of key's group.
func (x keyIndex) group(key []byte) []byte {
	var buf [32]byte
	copy(buf[:16], x.secret)
	copy(buf[16:], key)
	sum := sha256.Sum256(buf[:])
	return sum[:keyGroupBytes]
}

// keyMember is one key of a group, its slices into the group's value.
type keyMember struct{ key, entry []byte }

func decodeKeyGroup(v []byte) ([]keyMember, error) {
	var ms []keyMember
	for len(v) > 0 {
		if len(v) < 17 {
			return nil, errCorrupt
		}
		n, w := binary.Uvarint(v[16:])
		if w <= 0 || n == 0 || n > uint64(len(v)-16-w) {
			return nil, errCorrupt
		}
		m := keyMember{key: v[:16], entry: v[16+w : 16+w+int(n)]}
		if len(ms) > 0 && bytes.Compare(ms[len(ms)-1].key, m.key) >= 0 {
			return nil, errCorrupt
		}
		ms = append(ms, m)
		v = v[16+w+int(n):]
	}
	if len(ms) == 0 {
		return nil, errCorrupt
	}
	return ms, nil
}

func encodeKeyGroup(ms []keyMember) []byte {
	n := 0
	for _, m := range ms {
		n += 16 + 2 + len(m.entry)
	}
	b := make([]byte, 0, n)
	for _, m := range ms {
		b = append(b, m.key...)
		b = binary.AppendUvarint(b, uint64(len(m.entry)))
		b = append(b, m.entry...)
	}
	return b
}

// members reads key's group; i is where key is or would go.
func (x keyIndex) members(key []byte) (g []byte, ms []keyMember, i int, found bool, err error) {
	if len(key) != 16 {
		return nil, nil, 0, false, fmt.Errorf("queue: a key of %d bytes", len(key))
	}
	g = x.group(key)
	v := x.bk.Get(g)
	if v == nil {
		return g, nil, 0, false, nil
	}
	if ms, err = decodeKeyGroup(v); err != nil {
		return g, nil, 0, false, fmt.Errorf("queue: key group %x: %w", g, err)
	}
	for i = 0; i < len(ms); i++ {
		switch c := bytes.Compare(ms[i].key, key); {
		case c == 0:
			return g, ms, i, true, nil
		case c > 0:
			return g, ms, i, false, nil
		}
	}
	return g, ms, i, false, nil
}

// Get returns key's entry, or nil when the file does not hold the key.
// The entry is valid until the index is next written.
func (x keyIndex) Get(key []byte) ([]byte, error) {
	_, ms, i, found, err := x.members(key)
	if err != nil || !found {
		return nil, err
	}
	return ms[i].entry, nil
}

// Put sets key's entry.
func (x keyIndex) Put(key, entry []byte) error {
	g, ms, i, found, err := x.members(key)
	if err != nil {
		return err
	}
	m := keyMember{key: key, entry: entry}
	if found {
		ms[i] = m
	} else {
		ms = append(ms[:i], append([]keyMember{m}, ms[i:]...)...)
	}
	return x.bk.Put(g, encodeKeyGroup(ms))
}

// Delete removes key, if held.
func (x keyIndex) Delete(key []byte) error {
	g, ms, i, found, err := x.members(key)
	if err != nil || !found {
		return err
	}
	if len(ms) == 1 {
		return x.bk.Delete(g)
	}
	return x.bk.Put(g, encodeKeyGroup(append(ms[:i:i], ms[i+1:]...)))
}

// Each calls fn with every key and its entry, group by group, until fn
// returns false. fn must not write to the index; its slices are valid
// for the transaction.
func (x keyIndex) Each(fn func(key, entry []byte) (bool, error)) error {
	c := x.bk.Cursor()
	for g, v := c.First(); g != nil; g, v = c.Next() {
		ms, err := decodeKeyGroup(v)
		if err != nil {
			return fmt.Errorf("queue: key group %x: %w", g, err)
		}
		for _, m := range ms {
			more, err := fn(m.key, m.entry)
			if err != nil || !more {
				return err
			}
		}
	}
	return nil
}

// ForEach calls fn with every key and its entry.
func (x keyIndex) ForEach(fn func(key, entry []byte) error) error {
	return x.Each(func(k, v []byte) (bool, error) { return true, fn(k, v) })
}

// check checks that every key is in its own group (a key in another
// group could not be found).
func (x keyIndex) check() error {
	if len(x.secret) != 16 {
		return fmt.Errorf("queue: the key index's secret is %d bytes", len(x.secret))
	}
	c := x.bk.Cursor()
	for g, v := c.First(); g != nil; g, v = c.Next() {
		ms, err := decodeKeyGroup(v)
		if err != nil {
			return fmt.Errorf("queue: key group %x: %w", g, err)
		}
		for _, m := range ms {
			if !bytes.Equal(x.group(m.key), g) {
				return fmt.Errorf("queue: key %x is in group %x, not its own", m.key, g)
			}
		}
	}
	return nil
}
