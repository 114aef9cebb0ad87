package admin

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pgserver"
	"github.com/cdc-router/cdc-router/pubcheck"
	"github.com/cdc-router/cdc-router/registry"
	"github.com/cdc-router/cdc-router/snapshot"
)

// Report is what `cdc-router status` shows: the slot as seen from the database of the connection, and the
// state in that database's router schema. A slot of the same name in another database is reported as
// foreign (SlotDatabase) and none of its facts are shown as this database's.
type Report struct {
	Slot           string
	Database       string // current_database()
	SlotExists     bool   // the slot exists in this database
	SlotDatabase   string // the database of a slot of this name in another database; empty otherwise
	Locked         bool   // a router of this slot runs in this database (it holds the slot's advisory lock)
	Active         bool
	ConfirmedFlush cdc.LSN
	LagBytes       int64 // pg_current_wal_lsn() - confirmed_flush_lsn
	// LagTime is PostgreSQL's measure of the streaming router's acknowledgement delay
	// (pg_stat_replication.flush_lag; 0 once it is caught up and idle); LagTimeKnown is false while no
	// walsender streams the slot. It does not grow while the router acknowledges nothing: then the byte
	// lag grows, and the router's cdc_router_replication_lag_seconds is the live figure.
	LagTime       time.Duration
	LagTimeKnown  bool
	RetainedBytes int64  // pg_current_wal_lsn() - restart_lsn: the WAL kept for the slot
	SafeWALBytes  *int64 // safe_wal_size: WAL left before invalidation; nil without max_slot_wal_keep_size
	WALStatus     string
	Failover      bool   // the slot has FAILOVER: standbys with sync_replication_slots keep a copy
	Synced        bool   // the slot was synchronized from a former primary (this one was promoted)
	Invalidation  string // invalidation_reason (PostgreSQL 17+); empty while the slot is valid
	// Pending is what waits in the slot past the acknowledged position, counted by CountPending (a peek,
	// possible only while no router streams the slot); nil when not counted, with PendingNote saying why
	// when the count was tried and failed.
	Pending     *Unpublished
	PendingNote string
	// InFlight are the database's transactions, open with a transaction ID or prepared, that may still
	// write events into the slot (InFlightTransactions): until they end, no count says caught up, and reset
	// waits for them. InFlightNote says why they could not be read (InFlight is then nil).
	InFlight     []InFlight
	InFlightNote string
	Stored       *offsets.Position // nil when none is stored
	Quarantined  int64             // records of this slot and of this database's backfills
	Handled      int64             // of those, the ones replayed or discarded (`cdc-router quarantine`)
	Jobs         []snapshot.Job    // the slot's initial snapshot and this database's backfills, finished or not
	// Gaps are the publication gaps recorded for the slot whose backfill has not run: its router refuses
	// to start until it has (docs/howto/change-the-outbox-schema.md#publication-gaps).
	Gaps []pubcheck.RecordedGap

	// Publishing is what the slot's live router publishes now, as its record says (registry.Publishing: the
	// in-flight limit and the events not yet confirmed, at its last heartbeat); nil while none publishes or
	// its router does not record it (a version before migration 019).
	Publishing *registry.Publishing

	// Publication is the publication the pending events were counted with (the shard's with Shard).
	Publication string
	// Shard is the shard this is the report of (status --shard); nil for the unsharded slot.
	Shard *Shard
	// Shards are, in the report of the unsharded slot, the shards of this database (StatusOfShards).
	Shards []ShardReport
}

// Status reads the slot, the stored position, the quarantine counts and the jobs over an ordinary
// connection. Backfills are not tied to a slot: they are this database's (the router schema's) own.
func Status(ctx context.Context, conn *pgx.Conn, slot, schema string) (Report, error) {
	r := Report{Slot: slot}
	info, err := pgserver.InspectSlot(ctx, conn, slot)
	if err != nil {
		return r, err
	}
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&r.Database); err != nil {
		return r, fmt.Errorf("read the database name: %w", err)
	}
	if r.Locked, err = snapshot.Locked(ctx, conn, snapshot.LockKey(snapshot.InitialName(slot))); err != nil {
		return r, err
	}
	if info.Exists && info.Database != r.Database {
		r.SlotDatabase = info.Database
		if r.SlotDatabase == "" {
			r.SlotDatabase = "(none: a physical slot)"
		}
	} else if info.Exists {
		r.SlotExists, r.Active, r.ConfirmedFlush, r.WALStatus = true, info.Active, info.ConfirmedFlush, info.WALStatus
		r.Failover, r.Synced, r.Invalidation = info.Failover, info.Synced, info.Invalidation
	}
	if r.SlotExists && info.ConfirmedFlush != 0 {
		var lag *float64
		err := conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), $1::pg_lsn)::bigint,
			coalesce(pg_wal_lsn_diff(pg_current_wal_lsn(), s.restart_lsn), 0)::bigint, s.safe_wal_size,
			CASE WHEN r.pid IS NOT NULL THEN coalesce(extract(epoch FROM r.flush_lag), 0)::float8 END
			FROM pg_replication_slots s LEFT JOIN pg_stat_replication r ON r.pid = s.active_pid
			WHERE s.slot_name = $2`, info.ConfirmedFlush.String(), slot).Scan(&r.LagBytes, &r.RetainedBytes, &r.SafeWALBytes, &lag)
		if err != nil {
			return r, fmt.Errorf("read lag: %w", err)
		}
		if lag != nil {
			r.LagTime, r.LagTimeKnown = time.Duration(*lag*float64(time.Second)), true
		}
	}
	if r.InFlight, err = InFlightTransactions(ctx, conn); err != nil {
		r.InFlightNote = err.Error()
	}
	p, ok, err := offsets.NewStore(conn, schema, slot, 0).Load(ctx)
	if err != nil {
		return r, fmt.Errorf("%w (has `cdc-router migrate` run?)", err)
	}
	if ok {
		r.Stored = &p
	}
	err = conn.QueryRow(ctx, `SELECT count(*), count(handled_at) FROM `+pgx.Identifier{schema, "quarantine"}.Sanitize()+
		` WHERE slot = $1 OR slot LIKE 'backfill:%'`, slot).Scan(&r.Quarantined, &r.Handled)
	if err != nil {
		return r, fmt.Errorf("count quarantine (has `cdc-router migrate` run?): %w", err)
	}
	if r.Gaps, err = pubcheck.RecordedGaps(ctx, conn, schema, slot); err != nil {
		return r, err
	}
	// The record is shown when it can be read: a schema before 015 has none, and its absence changes no
	// other fact of the report (pg.router and status of the fleet name migrate for it).
	if rec, ok, err := registry.Of(ctx, conn, schema, slot); err == nil && ok && rec.Publishing != nil {
		if now, err := registry.Now(ctx, conn); err == nil && rec.Live(now) {
			r.Publishing = rec.Publishing
		}
	}
	all, err := snapshot.NewJobs(conn, schema).All(ctx)
	if err != nil {
		return r, fmt.Errorf("read snapshot progress: %w", err)
	}
	for _, j := range all {
		if snapshot.IsInitialOf(j.Name, slot) || j.Kind == "backfill" {
			r.Jobs = append(r.Jobs, j)
		}
	}
	return r, nil
}

// String renders the report for a terminal, one fact per line.
func (r Report) String() string {
	s := fmt.Sprintf("slot:             %s\n", r.Slot)
	if r.Shard != nil {
		s += fmt.Sprintf("shard:            %s (publication %s)\n", r.Shard.Name(), r.Shard.Publication)
	}
	switch {
	case r.SlotDatabase != "":
		s += fmt.Sprintf("slot exists:      no, not in this database (%s): a slot of that name belongs to database %s, "+
			"so its facts are not shown here; point --pg-url at %s to see them\n", r.Database, r.SlotDatabase, r.SlotDatabase)
	case !r.SlotExists:
		s += "slot exists:      no\n"
	default:
		active := "no (no router is streaming from it)"
		if r.Active {
			active = "yes"
		} else if j := r.initial(); j != nil && j.Running() {
			active = "no: the initial snapshot is in progress (see below); streaming starts when it is done"
		} else if r.Locked {
			active = "no, but a router of this slot runs (starting, or waiting for the slot)"
		}
		lagTime := "time unknown: no router streams the slot"
		if r.LagTimeKnown {
			lagTime = HumanDuration(r.LagTime)
		}
		safe := "no limit (max_slot_wal_keep_size = -1)"
		if r.SafeWALBytes != nil {
			safe = HumanBytes(*r.SafeWALBytes) + " left before PostgreSQL invalidates the slot"
		}
		s += fmt.Sprintf("slot active:      %s\nconfirmed flush:  %s\nlag:              %s, %s (%d bytes)\n",
			active, r.ConfirmedFlush, HumanBytes(r.LagBytes), lagTime, r.LagBytes)
		s += r.pendingLine() // what the lag is made of
		s += r.inFlightLine()
		s += fmt.Sprintf("wal_status:       %s\nretained WAL:     %s\nsafe_wal_size:    %s\n",
			r.WALStatus, HumanBytes(r.RetainedBytes), safe)
		if r.Invalidation != "" {
			s += "invalidated:      " + r.Invalidation + " (PostgreSQL will not decode from this slot again; see reset)\n"
		}
		s += "failover:         " + map[bool]string{true: "yes (standbys with sync_replication_slots = on keep a copy)",
			false: "no (a promoted standby will not have this slot; see --failover-slot)"}[r.Failover]
		if r.Synced {
			s += ", synchronized from a former primary"
		}
		s += "\n"
	}
	if r.Stored == nil {
		s += "stored position:  none\n"
	} else {
		s += fmt.Sprintf("stored position:  %s (cluster %s, timeline %d, %s ago)\n", r.Stored.LSN, r.Stored.SystemID,
			r.Stored.Timeline, time.Since(r.Stored.UpdatedAt).Round(time.Second))
		s += r.storedVersusConfirmed()
		if m := r.Stored.Mark; m.Confirmed() > 0 {
			s += fmt.Sprintf("                  inside transaction %s (xid %d): %d of its events are confirmed and "+
				"are not published again (all of its first %d)\n", m.Key.CommitLSN, m.Key.Xid, m.Confirmed(), m.Done)
		}
	}
	if p := r.Publishing; p != nil {
		s += fmt.Sprintf("publishing:       %d events unconfirmed, in-flight limit %d (summed over the lanes; "+
			"cdc_router_window_limit), at the router's last heartbeat\n", p.InFlight, p.WindowLimit)
	}
	s += fmt.Sprintf("quarantined rows: %d (%d handled, %d not handled)\n", r.Quarantined, r.Handled,
		r.Quarantined-r.Handled)
	for _, j := range r.Jobs {
		s += "snapshot:         " + jobLine(j) + "\n"
	}
	for _, g := range r.Gaps {
		from := "before the router first checked it"
		if g.From != nil {
			from = "from " + g.From.UTC().Format(time.RFC3339)
		}
		s += fmt.Sprintf("publication gap:  %s, %s to %s: rows inserted then were never streamed, and the router "+
			"refuses to start until `%s` has run\n", g.Table, from, g.To.UTC().Format(time.RFC3339), g.Backfill)
	}
	return s + shardsText(r.Shards, r.Slot)
}

// initial is the slot's first unfinished initial snapshot (of its one outbox table, or of one of several),
// or nil.
func (r Report) initial() *snapshot.Job {
	for i := range r.Jobs {
		if snapshot.IsInitialOf(r.Jobs[i].Name, r.Slot) && !r.Jobs[i].Done() {
			return &r.Jobs[i]
		}
	}
	return nil
}

// jobLine is one snapshot or backfill: state, rows, rate and time left.
func jobLine(j snapshot.Job) string {
	pct := 100.0
	if j.RowsTotal > 0 {
		pct = 100 * float64(j.RowsDone) / float64(j.RowsTotal)
	}
	line := fmt.Sprintf("%s %s, %d/%d rows (%.1f%%)", j.Name, jobState(j), j.RowsDone, j.RowsTotal, pct)
	if secs := j.UpdatedAt.Sub(j.StartedAt).Seconds(); secs > 0 && j.RowsDone > 0 {
		rate := float64(j.RowsDone) / secs
		line += fmt.Sprintf(", %.0f rows/s", rate)
		if j.Running() && j.RowsTotal > j.RowsDone {
			line += fmt.Sprintf(", about %v left", time.Duration(float64(j.RowsTotal-j.RowsDone)/rate*float64(time.Second)).Round(time.Second))
		}
	}
	if j.Failed() {
		line += ", error: " + j.Error
	}
	if j.Running() {
		line += fmt.Sprintf(", last progress %v ago", time.Since(j.UpdatedAt).Round(time.Second))
	}
	return line
}

// jobState is the job's state as status shows it: running (a process runs it), interrupted (recorded as
// running, but no process holds it), done or failed.
func jobState(j snapshot.Job) string {
	if j.Interrupted() {
		return "interrupted"
	}
	return j.State
}

// Reset removes exactly the state of slot in the connection's database: it drops the slot, and forgets
// the slot's stored position, its initial snapshot job and its publication check, so that the next `run`
// creates a new slot (and, with --snapshot=initial, snapshots the table). It is the operator's answer to a
// refusal after a lost slot or a restore. It holds the router's advisory lock of the slot throughout, so it
// refuses while any router of the slot runs in this database (streaming, waiting, or copying the initial
// snapshot) and no router starts meanwhile; it refuses a slot that belongs to another database. Nothing of
// other slots, backfills and quarantine records is touched.
//
// It refuses to drop a slot that still holds unpublished changes of opts.Publication: it peeks them
// without consuming (peekUnpublished, bounded in rows and time) and names how many events, of which
// transactions, opts.Force would drop; it refuses too when it cannot count them. An invalidated slot,
// whose WAL is gone, holds nothing it could count. With opts.Force it drops the slot anyway and returns
// what it dropped.
//
// Before it counts, it waits up to opts.InFlightWait for the database's transactions that are open (with a
// transaction ID) or prepared to end (InFlightTransactions): their events are not among the slot's
// committed changes until they commit, and the next run's new slot starts after them. Those still in
// flight past the bound make it refuse naming them (opts.Force does not cover them; opts.IgnoreInFlight
// does).
func Reset(ctx context.Context, conn *pgx.Conn, slot, schema string, opts ResetOptions) (Unpublished, error) {
	var dropped Unpublished
	err := reset(ctx, conn, slot, schema, opts, &dropped)
	return dropped, err
}

func reset(ctx context.Context, conn *pgx.Conn, slot, schema string, opts ResetOptions, dropped *Unpublished) error {
	lock := snapshot.LockKey(snapshot.InitialName(slot))
	mine, err := tryLock(ctx, conn, lock, resetLockWait)
	if err != nil {
		return fmt.Errorf("lock slot %s: %w", slot, err)
	}
	if !mine {
		return cdc.Fatalf("a router of slot %s is running (streaming, waiting for the slot, or copying the initial snapshot): "+
			"stop it before resetting; nothing was changed", slot)
	}
	defer conn.Exec(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock(hashtextextended($1, 0))", lock)
	info, err := pgserver.InspectSlot(ctx, conn, slot)
	if err != nil {
		return err
	}
	var db string
	if err := conn.QueryRow(ctx, "SELECT current_database()").Scan(&db); err != nil {
		return fmt.Errorf("read the database name: %w", err)
	}
	if info.Exists && info.Database == "" {
		return cdc.Fatalf("replication slot %s is a physical slot, not the router's: choose another --slot; nothing was changed", slot)
	}
	if info.Exists && info.Database != db {
		return cdc.Fatalf("replication slot %s belongs to database %s, not %s: to reset it run reset with --pg-url %s; "+
			"to keep it, choose another --slot for this database; nothing was changed", slot, info.Database, db,
			urlOf(conn, info.Database))
	}
	// With the lock held no router of the slot runs; a walsender still active is one of a router that has
	// just exited (the server ends it a moment later), or another process's.
	for deadline := time.Now().Add(resetLockWait); info.Active && time.Now().Before(deadline); {
		time.Sleep(100 * time.Millisecond)
		if info, err = pgserver.InspectSlot(ctx, conn, slot); err != nil {
			return err
		}
	}
	if info.Active {
		return cdc.Fatalf("slot %s is active: stop the process that streams from it (pg_stat_replication shows it) before "+
			"resetting; nothing was changed", slot)
	}
	if info.Exists && info.Invalidation == "" && info.WALStatus != "lost" {
		// What the transactions in flight write is counted only once they have committed: wait for them
		// first. Those that begin meanwhile write after reset began (awaitInFlight).
		left, err := awaitInFlight(ctx, conn, opts.InFlightWait, opts.OnInFlight)
		switch {
		case ctx.Err() != nil:
			return cdc.Fatalf("reset was interrupted while it waited for the transactions in flight of database %s "+
				"to end; nothing was changed", db)
		case err != nil:
			return cdc.Fatalf("reset cannot tell which transactions of database %s may still write into slot %s (%v): "+
				"give the role SELECT on pg_catalog.pg_stat_activity and pg_catalog.pg_prepared_xacts (PUBLIC has it "+
				"unless revoked); nothing was changed", db, slot, err)
		case len(left) > 0 && !opts.IgnoreInFlight:
			return inFlightRefusal(slot, db, max(opts.InFlightWait, 0), left)
		}
		stored := info.ConfirmedFlush
		p, ok, err := offsets.NewStore(conn, schema, slot, 0).Load(ctx)
		if err != nil {
			return fmt.Errorf("%w (has `cdc-router migrate` run?)", err)
		}
		var current string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&current); err != nil {
			return fmt.Errorf("read the WAL position: %w", err)
		}
		if end, _ := cdc.ParseLSN(current); ok && p.LSN > stored && p.LSN <= end {
			stored = p.LSN // a position stored after the last status update (from another server's WAL, it is ignored)
		}
		u, err := peekUnpublished(ctx, conn, slot, stored, opts)
		switch {
		case err != nil && !opts.Force:
			return peekRefusal(slot, err)
		case err == nil && u.Events() > 0 && !opts.Force:
			return unpublishedRefusal(slot, opts.Publication, stored, u)
		}
		u.InFlight = left
		*dropped = u
		if err != nil {
			dropped.NotCounted = err.Error()
		}
	}
	if info.Exists {
		if _, err := conn.Exec(ctx, "SELECT pg_drop_replication_slot($1)", slot); err != nil {
			return fmt.Errorf("drop slot %s: %w", slot, err)
		}
	}
	return pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		for _, table := range []string{"snapshots", "positions", "publication_checks"} {
			where, val := "slot = $1", slot
			if table == "snapshots" { // the slot's initial snapshot, and each table's of a router of several
				where, val = "name = $1 OR starts_with(name, $1 || '/')", snapshot.InitialName(slot)
			}
			_, err := tx.Exec(ctx, "DELETE FROM "+pgx.Identifier{schema, table}.Sanitize()+" WHERE "+where, val)
			if err != nil {
				return fmt.Errorf("forget the state of slot %s in %s.%s: %w", slot, schema, table, err)
			}
		}
		return nil
	})
}

// resetLockWait is how long reset tries the slot's lock: a router that has just exited may still hold it
// for a moment, until its server process has ended.
const resetLockWait = 3 * time.Second

// tryLock tries the session advisory lock of key for up to wait.
func tryLock(ctx context.Context, conn *pgx.Conn, key string, wait time.Duration) (bool, error) {
	deadline := time.Now().Add(wait)
	for {
		var mine bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", key).Scan(&mine); err != nil {
			return false, err
		}
		if mine || time.Now().After(deadline) {
			return mine, nil
		}
		select {
		case <-ctx.Done():
			return false, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// urlOf is the connection's URL for database db, without its password.
func urlOf(conn *pgx.Conn, db string) string {
	c := conn.Config()
	u := url.URL{Scheme: "postgres", User: url.User(c.User), Host: net.JoinHostPort(c.Host, strconv.Itoa(int(c.Port))),
		Path: "/" + db}
	if strings.HasPrefix(c.Host, "/") {
		u.Host, u.RawQuery = "", "host="+url.QueryEscape(c.Host)+"&port="+strconv.Itoa(int(c.Port))
	}
	return u.String()
}
