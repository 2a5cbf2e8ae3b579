package provision_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/hub"
)

// TestLayoutAlternatives measures, in this process, what the server keeps
// in memory per movement under three ways of refusing a second message for
// a key, and how long a clean restart takes: one subject per key (the
// movement stream, and a key-value bucket, which is a stream with one
// subject per key), one subject per store with a Nats-Msg-Id window as long
// as the horizon, and one subject per store with no window (the archive).
// It is a measurement, not a check: it runs only with
// RXEDGE_MEASURE_LAYOUTS=<movements> and logs its figures (DESIGN §5).
func TestLayoutAlternatives(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("RXEDGE_MEASURE_LAYOUTS"))
	if n <= 0 {
		t.Skip("a measurement: set RXEDGE_MEASURE_LAYOUTS=<movements>, e.g. 1000000")
	}
	layouts := []struct {
		name    string
		cfg     jetstream.StreamConfig
		subject func(i int) string
		msgID   bool
	}{
		{"one subject per key", jetstream.StreamConfig{Subjects: []string{"alt.*.*"}, MaxMsgsPerSubject: 1, Discard: jetstream.DiscardNew, DiscardNewPerSubject: true, Duplicates: time.Second},
			func(i int) string { return fmt.Sprintf("alt.S%03d.%032x", i%200, i) }, false},
		{"one subject per store, Nats-Msg-Id window of 35 days", jetstream.StreamConfig{Subjects: []string{"alt.*"}, Duplicates: 35 * 24 * time.Hour},
			func(i int) string { return fmt.Sprintf("alt.S%03d", i%200) }, true},
		{"one subject per store, no window (the archive)", jetstream.StreamConfig{Subjects: []string{"alt.*"}, Duplicates: time.Second},
			func(i int) string { return fmt.Sprintf("alt.S%03d", i%200) }, false},
	}
	payload := make([]byte, 300)
	for _, l := range layouts {
		dir := t.TempDir()
		o := hub.Options{Listen: "127.0.0.1:0", StoreDir: dir, NoSync: true}
		h, err := hub.Start(o)
		if err != nil {
			t.Fatal(err)
		}
		nc, js := connect(t, h.URL())
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		l.cfg.Name, l.cfg.Storage = "ALT", jetstream.FileStorage
		if _, err := js.CreateStream(ctx, l.cfg); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		for i := 0; i < n; i++ {
			m := nats.NewMsg(l.subject(i))
			m.Data = payload
			if l.msgID {
				m.Header.Set(jetstream.MsgIDHeader, fmt.Sprintf("%032x-%032x", i, i))
			}
			for {
				_, err := js.PublishMsgAsync(m)
				if err == nil {
					break
				}
				if !errors.Is(err, jetstream.ErrTooManyStalledMsgs) {
					t.Fatal(err)
				}
				<-js.PublishAsyncComplete() // a busy machine: wait, then go on
			}
			if i%4096 == 4095 {
				select {
				case <-js.PublishAsyncComplete():
				case <-ctx.Done():
					t.Fatal(ctx.Err())
				}
			}
		}
		<-js.PublishAsyncComplete()
		fill := time.Since(start)
		nc.Close()
		h.Shutdown()

		empty := heapNow()
		start = time.Now()
		h, err = hub.Start(o)
		if err != nil {
			t.Fatal(err)
		}
		_, js = connect(t, h.URL())
		info, err := js.Stream(ctx, "ALT")
		if err != nil {
			t.Fatal(err)
		}
		up := time.Since(start)
		held := heapNow() - empty
		t.Logf("%s: %d movements filled in %v; clean restart %v; heap held after it %.1f MiB, %.1f B per movement (%d messages, %d subjects)",
			l.name, n, fill.Round(time.Millisecond), up.Round(time.Millisecond), float64(held)/(1<<20), float64(held)/float64(n),
			info.CachedInfo().State.Msgs, info.CachedInfo().State.NumSubjects)
		h.Shutdown()
		cancel()
	}
}

// heapNow is the live heap after a collection.
func heapNow() int64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return int64(m.HeapAlloc)
}
