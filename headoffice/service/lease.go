package service

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	stdsync "sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/rxedge/agent/internal/redact"
)

// leaseClass is the first key of every lease's advisory lock ("RxHQ");
// the second is the job's name hashed. The sink's migration lock is a
// one-key lock, whose first half is 0: they never meet.
const leaseClass = 0x52784851

// Defaults of a Leaser.
const (
	DefaultLeasePoll  = time.Second
	DefaultLeaseCheck = 2 * time.Second
	// leaseQueryTimeout bounds each query of a lease's connection.
	leaseQueryTimeout = 5 * time.Second
)

// ErrLeaseLost is matched by the error of a job whose lease's connection
// failed: another service may hold the lease now.
var ErrLeaseLost = errors.New("service: lease lost")

// Leaser gives the jobs their leases: a PostgreSQL session advisory lock
// per job (pg_try_advisory_lock), held on a connection of its own for as
// long as the job runs. PostgreSQL lets go of it when that connection
// ends, so a service killed with kill -9 hands its jobs over as soon as
// its connections close.
type Leaser struct {
	// Config is the database's connection configuration.
	Config *pgx.ConnConfig
	// Poll is how often a standby asks for a lease; Check how often a
	// held lease's connection is checked. Defaults DefaultLeasePoll and
	// DefaultLeaseCheck.
	Poll  time.Duration
	Check time.Duration
}

// Lease is a held lease.
type Lease struct {
	conn   *pgx.Conn
	key    int32
	pid    uint32 // the backend of conn, which holds the lock
	ctx    context.Context
	cancel context.CancelFunc
	lost   atomic.Bool
	done   chan struct{}
	once   stdsync.Once
}

func leaseKey(job string) int32 {
	h := fnv.New32a()
	h.Write([]byte(job))
	return int32(h.Sum32())
}

// Acquire connects and waits for job's lease until it holds it or ctx
// ends; waiting is called once when another service holds it. A
// connection that fails is an error (the supervisor tries again later).
func (l *Leaser) Acquire(ctx context.Context, job string, waiting func()) (*Lease, error) {
	poll, check := l.Poll, l.Check
	if poll <= 0 {
		poll = DefaultLeasePoll
	}
	if check <= 0 {
		check = DefaultLeaseCheck
	}
	cfg := l.Config.Copy()
	cfg.RuntimeParams["application_name"] = "rxedge-hq lease " + job
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("service: lease of %s: connect to postgres %s: %w", job, cfg.Host, redact.Error(err, cfg.Password))
	}
	key := leaseKey(job)
	told := false
	for {
		qctx, cancel := context.WithTimeout(ctx, leaseQueryTimeout)
		var got bool
		err := conn.QueryRow(qctx, `SELECT pg_try_advisory_lock($1, $2)`, int32(leaseClass), key).Scan(&got)
		cancel()
		if err != nil {
			conn.Close(context.Background())
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("service: lease of %s: %w", job, redact.Error(err, cfg.Password))
		}
		if got {
			break
		}
		if !told && waiting != nil {
			waiting()
			told = true
		}
		t := time.NewTimer(poll)
		select {
		case <-ctx.Done():
			t.Stop()
			conn.Close(context.Background())
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	ls := &Lease{conn: conn, key: key, pid: conn.PgConn().PID(), done: make(chan struct{})}
	ls.ctx, ls.cancel = context.WithCancel(ctx)
	go ls.watch(check)
	return ls, nil
}

// watch checks the lease's connection every check; a check that fails
// ends the lease's context.
func (ls *Lease) watch(check time.Duration) {
	defer close(ls.done)
	t := time.NewTicker(check)
	defer t.Stop()
	for {
		select {
		case <-ls.ctx.Done():
			return
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ls.ctx, leaseQueryTimeout)
		err := ls.conn.Ping(qctx)
		cancel()
		if err != nil && ls.ctx.Err() == nil {
			ls.lost.Store(true)
			ls.cancel()
			return
		}
	}
}

// Fence checks, inside tx, that the lease is still held: its lock
// granted to the backend of the lease's connection. A write that calls
// it first commits only while this service holds the lease, or is
// refused with ErrLeaseLost: a service that lost its lease (its lease's
// connection ended, the lock went to a standby) and has not noticed yet
// cannot overwrite what the new holder writes. The caller locks the rows
// it writes before the check, so that a new holder's write of them waits
// for its commit.
func (ls *Lease) Fence(ctx context.Context, tx pgx.Tx) error {
	var held bool
	err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		AND classid::bigint = $1 AND objid::bigint = $2 AND objsubid = 2 AND pid = $3 AND granted)`,
		int64(uint32(leaseClass)), int64(uint32(ls.key)), int64(ls.pid)).Scan(&held)
	if err != nil {
		return fmt.Errorf("service: check the lease: %w", err)
	}
	if !held {
		ls.lost.Store(true)
		ls.cancel()
		return fmt.Errorf("service: the lease is no longer held by this service: %w", ErrLeaseLost)
	}
	return nil
}

// Context ends when the lease is released or lost, or the context it was
// acquired with ends.
func (ls *Lease) Context() context.Context { return ls.ctx }

// Lost says the lease's connection failed while it was held.
func (ls *Lease) Lost() bool { return ls.lost.Load() }

// Release lets go of the lease and closes its connection. It is safe to
// call twice.
func (ls *Lease) Release() {
	ls.once.Do(func() {
		ls.cancel()
		<-ls.done
		ctx, cancel := context.WithTimeout(context.Background(), leaseQueryTimeout)
		defer cancel()
		if !ls.lost.Load() {
			ls.conn.Exec(ctx, `SELECT pg_advisory_unlock($1, $2)`, int32(leaseClass), ls.key)
		}
		ls.conn.Close(ctx)
	})
}
