package sink

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/rxedge/agent/central"
	"github.com/rxedge/agent/testkit/agentbin"
	"github.com/rxedge/agent/testkit/natstest"
	"github.com/rxedge/agent/testkit/pgtest"
)

func TestMain(m *testing.M) {
	code := m.Run()
	agentbin.Cleanup()
	os.Exit(code)
}

// faultN is how many movements TestFaults sends through the sink:
// RXEDGE_SINK_FAULT_N, or a size the default test run affords. The issue's
// figure is 1000000 (README, "Long runs").
func faultN(t *testing.T) int {
	if v := os.Getenv("RXEDGE_SINK_FAULT_N"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			t.Fatalf("RXEDGE_SINK_FAULT_N=%q: want a number of at least 1000", v)
		}
		return n
	}
	if testing.Short() || raceEnabled {
		// The race detector slows the in-process cluster several times.
		return 4000
	}
	return 20000
}

// sinkProc is the built hq running hq sink.
type sinkProc struct {
	cmd    *exec.Cmd
	out    bytes.Buffer
	done   chan struct{}
	exitOK bool
}

func startSink(t *testing.T, bin string, args ...string) *sinkProc {
	t.Helper()
	p := &sinkProc{done: make(chan struct{})}
	p.cmd = exec.Command(bin, append([]string{"sink"}, args...)...)
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		p.exitOK = p.cmd.Wait() == nil
		close(p.done)
	}()
	return p
}

func (p *sinkProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// TestFaults sends movements from 200 stores through the sink, built and
// run as a child process, into a real PostgreSQL while central is a
// 3-node cluster with two partitions: the sink is killed with SIGKILL at
// random moments ten times, PostgreSQL is restarted with a fast and with
// an immediate shutdown while the sink writes, and an archive's leader is
// stopped so another node takes over. Afterwards every movement is in the
// table exactly once, each stored position is its archive's last
// sequence, and hq sink --verify agrees.
func TestFaults(t *testing.T) {
	n := faultN(t)
	const stores, parts = 200, 2
	pg := pgtest.Start(t)
	db := newDB(t, pg)
	bin := agentbin.BuildHQ(t)
	c := natstest.StartCluster(t, 3, natstest.WithStream(central.StreamOptions{Partitions: parts}))
	urls := strings.Join(c.URLs(), ",")
	nc := natstest.Connect(t, urls, nats.MaxReconnects(-1))
	js := natstest.JetStream(t, nc)
	archives := central.ArchiveStreams(parts)

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Minute)
	defer cancel()
	pubDone := make(chan error, 1)
	var published struct {
		sync.Mutex
		n int
	}
	// The load comes in ten tranches, one per kill, so that every fault
	// strikes while the sink has work.
	release := make(chan int, 20)
	go func() {
		pubDone <- publishLoad(ctx, js, n, stores, parts, release, func(k int) { published.Lock(); published.n = k; published.Unlock() })
	}()

	// Batches small against a tranche, so kills land between and inside
	// writes, not only at a tranche's end.
	args := []string{"--postgres", db.url, "--server", urls, "--partitions", strconv.Itoa(parts), "--batch", strconv.Itoa(max(100, min(5000, n/400)))}
	// state describes the archives and the publisher, for a failure.
	state := func() string {
		var parts []string
		for _, name := range archives {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			st, err := js.Stream(ctx, name)
			cancel()
			if err != nil {
				parts = append(parts, fmt.Sprintf("%s: %v", name, err))
				continue
			}
			parts = append(parts, fmt.Sprintf("%s: last sequence %d", name, st.CachedInfo().State.LastSeq))
		}
		published.Lock()
		defer published.Unlock()
		return fmt.Sprintf("%s; %d published", strings.Join(parts, ", "), published.n)
	}
	faults := map[int]string{2: "pg-fast", 4: "leader", 6: "pg-immediate", 8: "leader"}
	start := time.Now()
	at := 0
	tranche := n / 10
	for kill := 1; kill <= 10; kill++ {
		end := kill * tranche
		if kill == 10 {
			end = n
		}
		// Half the tranche first; the kill point (or the fault) falls in
		// it, and the other half is released just then, so the fault
		// strikes while movements are being published, archived and
		// written.
		base := (kill - 1) * tranche
		release <- base + tranche/2
		p := startSink(t, bin, args...)
		at = written(t, db, p, base+tranche/8+rand.IntN(tranche/4), state)
		release <- end
		switch faults[kill] {
		case "pg-fast", "pg-immediate":
			mode := strings.TrimPrefix(faults[kill], "pg-")
			if err := pg.Restart(mode); err != nil {
				t.Fatal(err)
			}
			t.Logf("kill %d: PostgreSQL restarted (%s) at %d written", kill, mode, at)
		case "leader":
			arch := central.ArchiveStream(kill/4-1, parts)
			l := c.WaitLeaderOf(t, arch)
			c.StopNode(l)
			nl := c.WaitLeaderOf(t, arch)
			t.Logf("kill %d: %s leader moved from node %d to node %d at %d written", kill, arch, l, nl, at)
			c.RestartNode(t, l)
		}
		if faults[kill] != "" {
			at = written(t, db, p, base+tranche*3/4, state)
		}
		p.kill()
		published.Lock()
		t.Logf("kill %d (SIGKILL) after %s: %d archive messages written, %d published", kill, time.Since(start).Round(time.Millisecond), at, published.n)
		published.Unlock()
	}
	if err := <-pubDone; err != nil {
		t.Fatalf("publish: %v", err)
	}
	waitArchived(t, js, archives, n)

	// The last run catches up; the rows/s of the whole run are the
	// figure a backfill would see with faults.
	p := startSink(t, bin, append(args, "--until-caught-up")...)
	select {
	case <-p.done:
	case <-time.After(30 * time.Minute):
		p.kill()
		t.Fatalf("the sink did not catch up in 30 minutes:\n%s", p.out.String())
	}
	if !p.exitOK {
		t.Fatalf("sink --until-caught-up failed:\n%s", p.out.String())
	}
	t.Logf("%d movements through the sink with 10 kills, 2 PostgreSQL restarts and 2 leader changes in %s", n, time.Since(start).Round(time.Millisecond))

	if got := db.count(t, `SELECT count(*) FROM movements`); got != int64(n) {
		t.Errorf("movements holds %d rows, want %d", got, n)
	}
	if got := db.count(t, `SELECT count(DISTINCT (store_id, seq)) FROM movements`); got != int64(n) {
		t.Errorf("movements holds %d store sequences, want %d", got, n)
	}
	if got := db.count(t, `SELECT count(*) FROM movement_conflicts`) + db.count(t, `SELECT count(*) FROM sink_rejects`); got != 0 {
		t.Errorf("%d conflicts and rejects, want none", got)
	}
	var archived uint64
	for _, name := range archives {
		st, err := js.Stream(testContext(t), name)
		if errors.Is(err, jetstream.ErrStreamNotFound) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		info := st.CachedInfo().State
		archived += info.Msgs
		if got := db.count(t, `SELECT coalesce(max(last_seq), 0) FROM sink_positions WHERE archive_stream = $1`, name); uint64(got) != info.LastSeq {
			t.Errorf("%s: stored position %d, archive's last sequence %d", name, got, info.LastSeq)
		}
	}
	// The archive keeps a message twice only if a source redelivered it
	// past its duplicate window; the sink then holds it as a repeat.
	if reps := db.count(t, `SELECT count(*) FROM movement_repeats`); uint64(reps) != archived-uint64(n) {
		t.Errorf("%d repeats, the archives hold %d messages for %d movements", reps, archived, n)
	}
	v := exec.Command(bin, append([]string{"sink", "--verify"}, args...)...)
	out, err := v.CombinedOutput()
	if err != nil {
		t.Fatalf("sink --verify: %v\n%s", err, out)
	}
	t.Logf("verify:\n%s", out)
}

// written waits until the sink has written at least want archive
// messages in all, and returns how many it has; polled (the database
// signals nothing), across PostgreSQL restarts, with a deadline.
func written(t *testing.T, db *testDB, p *sinkProc, want int, state func() string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Minute)
	for {
		var got int64
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		c, err := pgx.Connect(ctx, db.url)
		if err == nil {
			err = c.QueryRow(ctx, `SELECT coalesce(sum(last_seq), 0) FROM sink_positions`).Scan(&got)
			c.Close(ctx)
		}
		cancel()
		if err == nil && got >= int64(want) {
			return int(got)
		}
		select {
		case <-p.done:
			t.Fatalf("the sink exited by itself (%v):\n%s", p.cmd.ProcessState, p.out.String())
		default:
		}
		if time.Now().After(deadline) {
			p.kill()
			t.Fatalf("the sink wrote %d archive messages in 10 minutes, want %d (last error %v); %s; its output:\n%s", got, want, err, state(), p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// publishLoad publishes n movements of stores stores into their
// partitions, as agents do, retrying what a leader change interrupts; a
// message central already holds (wrong last sequence) is stored.
func publishLoad(ctx context.Context, js jetstream.JetStream, n, stores, parts int, release <-chan int, progress func(int)) error {
	seqs := make([]uint64, stores)
	publish := func(msg *nats.Msg) error {
		for attempt := 0; ; attempt++ {
			pctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := js.PublishMsg(pctx, msg)
			cancel()
			var api *jetstream.APIError
			if err == nil || (errors.As(err, &api) && api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence) {
				return nil
			}
			if ctx.Err() != nil || attempt > 200 {
				return fmt.Errorf("publish: %w", err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	const window = 512
	allowed := 0
	for i := 0; i < n; {
		for i >= allowed {
			select {
			case allowed = <-release:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		var futs []jetstream.PubAckFuture
		var msgs []*nats.Msg
		next := min(i+window, n, allowed)
		for j := i; j < next; j++ {
			s := j % stores
			store := fmt.Sprintf("S%04d", s+1)
			seqs[s]++
			m := mv(store, seqs[s], payload{})
			msg := m.Msg()
			msg.Subject = central.PartitionSubject(central.Partition(store, parts), parts, store, m.Key)
			f, err := js.PublishMsgAsync(msg)
			if err != nil {
				if err := publish(msg); err != nil {
					return err
				}
				continue
			}
			futs, msgs = append(futs, f), append(msgs, msg)
		}
		// One deadline for the window: after a leader change the acks of
		// a whole window may never come, and each is then resent at once.
		deadline := time.After(10 * time.Second)
		expired := false
		for k, f := range futs {
			if !expired {
				select {
				case <-f.Ok():
					continue
				case <-f.Err():
				case <-deadline:
					expired = true
				case <-ctx.Done():
					return ctx.Err()
				}
			} else {
				select {
				case <-f.Ok():
					continue
				default:
				}
			}
			if err := publish(msgs[k]); err != nil {
				return err
			}
		}
		progress(next)
		i = next
	}
	return nil
}
