package registry

import (
	"context"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/metrics"
)

// Keep writes rec when the router starts (role from state()), refreshes role, heartbeat_at and last_error
// every HeartbeatInterval and at once when the role changes (it polls state() every second), and records
// role stopped with stopped_at when ctx ends (with a bounded timeout of its own). What rec leaves empty of
// the process (Host, PID, StartedAt, Version, Instance) it fills with this process's own. Its first
// successful write also deletes the slot's records of other processes that stopped or were not heard from
// for a day, never a live one's.
//
// connect opens an ordinary SQL connection (the caller passes pgserver.ConnectSQL bound to its URL); Keep
// holds one connection and opens another at the next beat when it was cut. A failed write is logged at
// WARN once per distinct error (naming the GRANT when the role may not write, and migrate when the table
// does not exist), at INFO when writes succeed again, and retried at the next beat; it never stops the
// router. It returns when the final write is done.
func Keep(ctx context.Context, connect func(context.Context) (*pgx.Conn, error), schema string, rec Record,
	state func() State, log *slog.Logger) {
	newKeeper(connect, schema, rec, state, log).run(ctx)
}

// keeper is one process's record and the connection that writes it; only Keep's goroutine uses it.
type keeper struct {
	connect func(context.Context) (*pgx.Conn, error)
	schema  string
	rec     Record
	state   func() State
	log     *slog.Logger
	conn    *pgx.Conn
	pruned  bool   // the slot's superseded records were deleted
	failing string // the last failure logged (errKey), "" while writes succeed
	old019  bool   // the table has no publishing columns (a schema migrated before 019): written without them

	beat, poll, writeTimeout, stopTimeout time.Duration
}

func newKeeper(connect func(context.Context) (*pgx.Conn, error), schema string, rec Record,
	state func() State, log *slog.Logger) *keeper {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rec = rec.withProcess(time.Now())
	return &keeper{connect: connect, schema: schema, rec: rec, state: state,
		log:  log.With("slot", rec.Slot, "instance", rec.Instance),
		beat: HeartbeatInterval, poll: time.Second, writeTimeout: 5 * time.Second, stopTimeout: 3 * time.Second}
}

func (k *keeper) run(ctx context.Context) {
	defer k.close()
	k.observe()
	k.write(ctx, false)
	last := time.Now()
	t := time.NewTicker(k.poll)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			k.observe()
			k.rec.Role = metrics.StateStopped
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), k.stopTimeout)
			k.write(sctx, true)
			cancel()
			return
		case <-t.C:
			changed := k.observe()
			// A role change is written at once, unless writes fail: then at the next beat, as any retry.
			if (changed && k.failing == "") || time.Since(last) >= k.beat {
				k.write(ctx, false)
				last = time.Now()
			}
		}
	}
}

// observe reads the router's role, last error and publishing into the record, and reports whether the
// role changed.
func (k *keeper) observe() bool {
	st := k.state()
	role := st.Role
	if role == "" {
		role = metrics.StateStarting
	}
	changed := role != k.rec.Role
	k.rec.Role, k.rec.LastError, k.rec.Publishing = role, "", st.Publishing
	if st.Err != nil {
		k.rec.LastError = st.Err.Error()
	}
	return changed
}

// write writes the record within writeTimeout and reports the outcome; a write that ctx's end cut short
// before the final one says nothing.
func (k *keeper) write(ctx context.Context, stopping bool) {
	wctx, cancel := context.WithTimeout(ctx, k.writeTimeout)
	defer cancel()
	err := k.tryWrite(wctx, stopping)
	if err != nil && !stopping && ctx.Err() != nil {
		return
	}
	k.report(err)
}

// tryWrite refreshes the record, or writes it whole when it is not there (the first write, or a row that
// was deleted), connecting first when there is no connection; it drops a connection that failed for
// another cause than PostgreSQL's refusal of the statement, so that the next beat connects again.
func (k *keeper) tryWrite(ctx context.Context, stopping bool) error {
	if k.conn == nil || k.conn.IsClosed() {
		conn, err := k.connect(ctx)
		if err != nil {
			return err
		}
		k.conn = conn
	}
	err := k.beatOrInsert(ctx, stopping)
	if err == nil && !k.pruned {
		err = k.prune(ctx)
	}
	if err != nil && !isRefusal(err) {
		k.close()
	}
	return err
}

func (k *keeper) close() {
	if k.conn != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		k.conn.Close(ctx)
		cancel()
		k.conn = nil
	}
}

// report logs a failed write at WARN once per distinct error, and at INFO the first success after failures.
func (k *keeper) report(err error) {
	if err == nil {
		if k.failing != "" {
			k.log.Info("the router's record is written again", "table", k.table())
		}
		k.failing = ""
		return
	}
	key := errKey(err)
	if key == k.failing {
		k.log.Debug("the router's record is still not written", "error", err)
		return
	}
	k.failing = key
	k.log.Warn(k.failure(err), "table", k.table(), "error", err)
}

// table is the routers table's name as SQL.
func (k *keeper) table() string { return pgx.Identifier{k.schema, "routers"}.Sanitize() }
