package replication

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/snapshot"
)

// The slot's lock is a session advisory lock that a run takes on its ordinary connection before anything
// else (one router per slot:
// docs/howto/run-two-routers.md#how-the-standby-waits) and moves to its replication
// connection once that is open (moveTo), so that it ends with the walsender: PostgreSQL releases it when that
// session ends (a closed or cut connection, a terminated backend, a restart, and, while the slot is streamed,
// wal_sender_timeout, which the run sets to its lease: fence.go), and the router that held it learns of that
// only by asking. While streaming, the router writes to the broker under the lease of fence.go. The initial
// snapshot is copied while the slot is not streamed, so its copy holds the lock as a lease (seeds 8063 and
// 8110 of the harness: a copying router whose connections were cut copied on beside the router that took the
// slot over, both answering /readyz?active=1 with 200):
//
//   - the copying router asks, on a connection of its own, every lockCheckEvery whether the session that holds
//     its lock (its replication connection's) still holds it, and counts on the lock for lockLease from the
//     start of the last check that found it held. A no, an error, or no answer within the lease ends the copy at once:
//     the state leaves snapshot (/readyz?active=1 503), the copy's context ends, so it hands the broker no
//     more rows and the run closes its publisher as it returns, and the run starts again (and stands by);
//   - a router that takes the lock and resumes an unfinished initial snapshot first waits lockLease and
//     lockMargin from the moment it got the lock (fence): a router that held it before has stopped by then.
//
// So two routers never copy at once, nor answer /readyz?active=1 with 200 at once, unless a process is held
// up for longer than lockMargin (a suspended process or virtual machine, a machine too loaded to run it).
const (
	lockCheckEvery = 250 * time.Millisecond
	lockLease      = 1500 * time.Millisecond
	lockMargin     = 250 * time.Millisecond
)

// slotLock is a run's hold of the slot's lock: taken on the session of sql, since at (when PostgreSQL's yes
// arrived, which is after the lock was granted), and held by the session of backend pid: sql's until moveTo
// moves it to the replication connection's.
type slotLock struct {
	sql  *pgx.Conn
	slot string
	at   time.Time
	pid  uint32
}

// lockSlot takes the slot's lock on sql, or returns an error wrapping pgserver.ErrSlotBusy while another
// session holds it.
func lockSlot(ctx context.Context, sql *pgx.Conn, slot string) (slotLock, error) {
	var mine bool
	if err := sql.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended('cdc_router:' || $1, 0))", slot).Scan(&mine); err != nil {
		return slotLock{}, fmt.Errorf("lock slot %s: %w", slot, err)
	}
	if !mine {
		return slotLock{}, fmt.Errorf("another router holds slot %s (it may be copying the initial snapshot): %w", slot, pgserver.ErrSlotBusy)
	}
	return slotLock{sql: sql, slot: slot, at: time.Now(), pid: sql.PgConn().PID()}, nil
}

// moveTo moves the lock from the ordinary connection's session to the session of the replication connection
// conn (a walsender's: a replication=database connection runs SQL until START_REPLICATION), and starts the
// fence's hold (Fence.begin). PostgreSQL ends a walsender that has heard nothing from its router for
// wal_sender_timeout, which the run sets to --lease on conn (connectReplication), and the lock goes with it: a
// router that stopped answering (paused, wedged, its host gone while its kernel still answers TCP) no longer
// holds the slot's lock past that, while its ordinary session, which the kernel keeps alive, would hold it for
// as long as the process lives. The lock is released before it is taken again: a router that takes it meanwhile
// holds the slot, and this run stands by.
func (l *slotLock) moveTo(ctx context.Context, conn *pgconn.PgConn, fence *Fence) error {
	if _, err := l.sql.Exec(ctx, "SELECT pg_advisory_unlock(hashtextextended('cdc_router:' || $1, 0))", l.slot); err != nil {
		return fmt.Errorf("move the lock of slot %s to the replication connection: %w", l.slot, err)
	}
	asked := time.Now()
	// A replication connection takes the simple query protocol only; the slot's name is [a-z0-9_] (Config.Validate).
	res, err := conn.Exec(ctx, "SELECT pg_try_advisory_lock(hashtextextended('cdc_router:"+l.slot+"', 0))").ReadAll()
	if err != nil {
		return fmt.Errorf("move the lock of slot %s to the replication connection: %w", l.slot, err)
	}
	if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].Rows[0]) != 1 {
		return fmt.Errorf("move the lock of slot %s to the replication connection: unexpected answer", l.slot)
	}
	if string(res[0].Rows[0][0]) != "t" {
		return fmt.Errorf("another router took slot %s while this one moved its lock to its replication connection: %w",
			l.slot, pgserver.ErrSlotBusy)
	}
	l.pid = conn.PID()
	fence.begin(asked)
	return nil
}

// fence waits until lockLease and lockMargin have passed since the lock was taken, before a copy of an
// unfinished initial snapshot: a router that held the lock before and copied has stopped by then, whether
// or not it has learnt yet that it lost the lock.
func (l slotLock) fence(ctx context.Context, stats *metrics.Stats) error {
	wait := time.Until(l.at.Add(lockLease + lockMargin))
	if wait <= 0 {
		return nil
	}
	stats.WaitFor(fmt.Sprintf("the router that held slot %s before to stop copying (%v after the lock was taken)", l.slot,
		lockLease+lockMargin))
	if !sleep(ctx, wait) {
		return ctx.Err()
	}
	return nil
}

// holding runs work (a copy of the initial snapshot) under the lock's lease (see above): work's context ends
// once the lock counts as lost, and holding then returns why (a restart with cause postgres), whatever work
// returned. The lease's connection is dialled and asked once before work begins.
func (l slotLock) holding(ctx context.Context, cfg Config, stats *metrics.Stats, log *slog.Logger,
	work func(ctx context.Context) error) error {
	conn, err := pgserver.ConnectSQLWithin(ctx, cfg.PGURL, cfg.PGTimeout)
	if err != nil {
		return err
	}
	w := &lease{lock: l, pid: l.pid, host: pgserver.Host(cfg.PGURL), conn: conn, stats: stats, log: log,
		over: make(chan struct{}), fence: cfg.Fence}
	first := time.Now()
	if err := w.ask(ctx, first.Add(lockLease)); err != nil {
		w.close()
		return err
	}
	w.fence.grant(first, lockLease)
	var wctx context.Context
	wctx, w.cancel = context.WithCancelCause(ctx)
	go w.run(wctx, first)
	err = work(wctx)
	w.mu.Lock()
	w.ended = true
	lost := w.gone
	w.mu.Unlock()
	w.cancel(nil) // ends a check under way
	<-w.over
	if lost != nil {
		stats.SetState(metrics.StateRestarting, lost) // the copy may have said snapshot as the lease ended it
		return lost
	}
	return err
}

// lease watches one copy's hold of the lock (slotLock.holding).
type lease struct {
	lock   slotLock
	pid    uint32    // the backend of the lock's session
	host   string    // the server, for the messages
	conn   *pgx.Conn // the lease's own connection
	fence  *Fence    // the run's Fence, renewed by each check that finds the lock held
	stats  *metrics.Stats
	log    *slog.Logger
	cancel context.CancelCauseFunc // ends the copy's context
	over   chan struct{}           // closed when run stopped asking

	mu    sync.Mutex
	gone  error // why the lock counts as lost; nil while it holds
	ended bool  // the copy returned: a loss is no longer the copy's to stop for
}

// lost is the error that ends a copy whose lock is gone or unconfirmed, why being the first half of its
// sentence.
func (w *lease) lost(why string) error {
	return caused(metrics.CausePostgres, errors.New(why+": the router stopped copying the initial snapshot, so that a "+
		"router that takes the slot over copies alone; it tries again and resumes the copy from its stored progress, or stands by"))
}

// silent is lost for a PostgreSQL that did not confirm the lock within the lease.
func (w *lease) silent() error {
	return w.lost(fmt.Sprintf("the initial snapshot stopped waiting on PostgreSQL at %s: it did not confirm within %v that the "+
		"router still holds the lock of slot %s (a stalled server or a silent network partition)", w.host, lockLease, w.lock.slot))
}

// ask returns lost unless PostgreSQL answers by until that the lock's session holds it.
func (w *lease) ask(ctx context.Context, until time.Time) error {
	actx, cancel := context.WithDeadline(ctx, until)
	defer cancel()
	held, err := snapshot.HeldBy(actx, w.conn, snapshot.LockKey(snapshot.InitialName(w.lock.slot)), w.pid)
	switch {
	case err != nil && actx.Err() != nil && ctx.Err() == nil:
		return w.silent()
	case err != nil:
		return w.lost(fmt.Sprintf("the router could not confirm that it still holds the lock of slot %s (%v)", w.lock.slot, err))
	case !held:
		return w.lost(fmt.Sprintf("the router lost the lock of slot %s (the session of its ordinary connection no longer holds it)",
			w.lock.slot))
	}
	return nil
}

// run asks every lockCheckEvery until ctx ends (the copy returned, or the run stops), and ends the copy
// (lose) once an answer says the lock is gone or none came within lockLease of the start of the last check
// that found it held (the first at confirmed); a timer of its own keeps that bound whatever the wait on an
// answer.
func (w *lease) run(ctx context.Context, confirmed time.Time) {
	defer w.close() // after over: holding does not wait for it
	defer close(w.over)
	expire := time.AfterFunc(time.Until(confirmed.Add(lockLease)), func() { w.lose(w.silent()) })
	defer expire.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(confirmed.Add(lockCheckEvery))):
		}
		start := time.Now()
		if err := w.ask(ctx, confirmed.Add(lockLease)); err != nil {
			if ctx.Err() == nil {
				w.lose(err)
			}
			return
		}
		confirmed = start
		w.fence.grant(start, lockLease)
		expire.Reset(time.Until(confirmed.Add(lockLease)))
	}
}

// lose ends the copy with err, once, unless it returned: readiness first, so that /readyz?active=1 says 503
// at once, then the copy's context.
func (w *lease) lose(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gone != nil || w.ended {
		return
	}
	w.gone = err
	w.stats.SetState(metrics.StateRestarting, err)
	w.cancel(err)
	w.log.Warn("stopped copying the initial snapshot: the slot's lock is gone or unconfirmed", "error", err)
}

// close closes the lease's connection, within a second.
func (w *lease) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	w.conn.Close(ctx)
}
