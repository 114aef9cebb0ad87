package chaos

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// inject applies the faults at their times, one after another (a fault that is late starts at once). A
// backfill runs beside the next faults; bg is done when every one has finished.
func (w *world) inject(start time.Time, faults []gen.Step, bg *sync.WaitGroup) {
	for n, f := range faults {
		base := start
		if f.AfterHuge {
			select {
			case <-w.hugeCommitted:
				base = w.hugeAt
			case <-time.After(time.Until(start.Add(w.plan.Setup.Duration))):
				w.rec.Event(check.Event{From: time.Now(), To: time.Now(), Kind: f.Kind, Note: "skipped: the huge transaction did not commit"})
				continue
			}
		}
		if d := time.Until(base.Add(f.At)); d > 0 {
			time.Sleep(d)
		}
		from := time.Now()
		if f.Kind == gen.CmdBackfill {
			bg.Add(1)
			go func() {
				defer bg.Done()
				note := w.backfill(n)
				w.rec.Event(check.Event{From: from, To: time.Now(), Kind: f.Kind, Note: note})
			}()
			continue
		}
		if f.Kind == gen.CmdResetIdle {
			w.resetIdle(f.Dur)
			continue
		}
		if f.Kind == gen.CmdResetInFlight {
			w.resetInFlight(f)
			continue
		}
		if f.Kind == gen.CmdRetireInFlight {
			w.retireInFlight(f, bg)
			continue
		}
		if f.Kind == gen.CmdInboxRequests {
			w.inboxRequests(f, bg)
			continue
		}
		if f.Kind == gen.CmdReplay {
			w.rec.Event(w.replay())
			continue
		}
		if f.Kind == gen.FaultExchangeDelete || f.Kind == gen.FaultExchangeUnbind {
			w.exchangeFault(f, bg)
			continue
		}
		if f.Kind == gen.FaultPause {
			w.rec.Event(w.pauseFault(f))
			continue
		}
		if f.Kind == gen.OpHot {
			w.hotTransaction(f)
			continue
		}
		if w.plan.Setup.Standby && (f.Kind == gen.FaultKill || f.Kind == gen.FaultTerm || f.Kind == gen.FaultPGCutActive) {
			w.rec.Event(w.takeoverFault(f))
			continue
		}
		switch f.Kind {
		case gen.FaultBrokerRestart, gen.FaultMemAlarm:
			w.brokerFault(f)
			continue
		case gen.FaultQueuePolicy:
			w.queuePolicyFault(f, bg)
			continue
		case gen.FaultBrokerKill:
			w.brokerKill(f)
			continue
		case gen.FaultPermissions:
			w.permissionsFault(f)
			continue
		case gen.FaultPGRights:
			w.pgRightsFault(f)
			continue
		}
		note := w.apply(f)
		w.rec.Event(check.Event{From: from, To: time.Now(), Kind: f.Kind, Router: f.Router, Note: note})
	}
}

// apply applies one fault or command and returns a note on its outcome.
func (w *world) apply(f gen.Step) string {
	switch f.Kind {
	case gen.FaultKill:
		_, addr := w.routers.Stop(f.Router, syscall.SIGKILL, 10*time.Second)
		time.Sleep(f.Dur)
		w.routers.Start(f.Router, addr)
	case gen.FaultTerm:
		code, addr := w.routers.Stop(f.Router, syscall.SIGTERM, 45*time.Second)
		w.routers.Start(f.Router, addr)
		return fmt.Sprintf("exit %d", code)
	case gen.FaultAMQPCut:
		w.mqProxy.Cut()
	case gen.FaultAMQPPause:
		w.mqProxy.Pause()
		time.Sleep(f.Dur)
		w.mqProxy.Resume()
	case gen.FaultPGCut:
		w.pgProxy.Cut()
	case gen.FaultPGPause, gen.FaultPGHole:
		w.pgProxy.Pause()
		time.Sleep(f.Dur)
		w.pgProxy.Resume()
	case gen.FaultPGFast, gen.FaultPGCrash:
		mode := "fast"
		if f.Kind == gen.FaultPGCrash {
			mode = "immediate"
		}
		w.pg.Stop(mode)
		time.Sleep(f.Dur)
		if err := w.pg.Start(); err != nil {
			w.t.Errorf("PostgreSQL did not start again: %v", err)
		}
	case gen.CmdResetLive:
		if !w.routers.Ready(f.Router) {
			return "skipped: the router is not ready"
		}
		out, code := w.cli(time.Minute, "reset", "--slot", w.slot(f.Router))
		return fmt.Sprintf("exit %d: %s", code, lastLine(out))
	case gen.FaultPubGap:
		return w.publicationGap(f.Dur)
	case gen.FaultColumn:
		return w.columnChange(f.N)
	case gen.FaultDrift:
		if f.N == 1 {
			return w.otherTable(f.Dur)
		}
		return w.drift(f.Dur)
	case gen.FaultPartAttach:
		return w.attachPartition()
	case gen.FaultPartDetach, gen.FaultPartDrop:
		return w.changePartition(f.Kind)

	}
	return ""
}

// resetIdle stops router 0 gracefully (and its standby), lets the writers go on for d (their rows wait in
// the slot), runs reset without --force, and starts the router again. The stop and the reset are recorded
// apart.
func (w *world) resetIdle(d time.Duration) {
	addrs := w.stopSlot(0, "before a reset")
	time.Sleep(d)
	from := time.Now()
	out, code := w.cli(time.Minute, "reset", "--slot", w.slot(0))
	w.rec.Event(check.Event{From: from, To: time.Now(), Kind: gen.CmdResetIdle, Note: fmt.Sprintf("exit %d: %s", code, lastLine(out))})
	w.startSlot(0, addrs)
}

// stopSlot stops slot i's router processes gracefully (SIGTERM), records each stop with why, and returns
// their /readyz addresses for startSlot.
func (w *world) stopSlot(i int, why string) []string {
	from := time.Now()
	var addrs []string
	for _, k := range w.slotProcs(i) {
		code, addr := w.routers.Stop(k, syscall.SIGTERM, 45*time.Second)
		addrs = append(addrs, addr)
		now := time.Now()
		w.rec.Event(check.Event{From: from, To: now, Gone: now, Kind: gen.FaultTerm, Router: i, Proc: k / w.plan.Setup.Routers(), Note: fmt.Sprintf("exit %d (%s)", code, why)})
	}
	return addrs
}

// startSlot starts slot i's router processes again on addrs (stopSlot's).
func (w *world) startSlot(i int, addrs []string) {
	for n, k := range w.slotProcs(i) {
		w.routers.Start(k, addrs[n])
	}
}

func (w *world) backfill(n int) string {
	s := w.plan.Setup
	table := s.Tables[n%len(s.Tables)]
	args := w.backfillFlags("backfill", "--where", "true", "--table", table, "--name", fmt.Sprintf("chaos_%d", n))
	if table == gen.MappedTable {
		args = append(args, w.mappingFlags()...)
	}
	out, code := w.cli(3*time.Minute, args...)
	return fmt.Sprintf("%s exit %d: %s", table, code, lastLine(out))
}

// publicationGap drops public.outbox from the publication and adds it back after d.
func (w *world) publicationGap(d time.Duration) string {
	ctx := context.Background()
	c, err := pgx.Connect(ctx, w.directURL())
	if err != nil {
		return err.Error()
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, `ALTER PUBLICATION cdc_router_outbox DROP TABLE public.outbox`); err != nil {
		return err.Error()
	}
	began := time.Now()
	w.writeInGap(ctx, c)
	time.Sleep(d - time.Since(began))
	if _, err := c.Exec(ctx, `ALTER PUBLICATION cdc_router_outbox ADD TABLE public.outbox`); err != nil {
		return err.Error()
	}
	return ""
}

// writeInGap commits two rows of public.outbox (one aggregate of its own, versions 1 and 2) while the table
// is out of the publication, whatever the writers do then: under load the faults run late, a gap may come
// after the writers stopped, and a gap without rows cannot tell a router that never notices one (the
// mutant gap-check-off passed every CI seed so) from one that does. Only the gap's backfill can publish them.
func (w *world) writeInGap(ctx context.Context, c *pgx.Conn) {
	agg := fmt.Sprintf("gap%d-rows", w.nextInflight())
	rows := []check.Row{{ID: uuid(), Table: "public.outbox", Aggregate: "order/" + agg, Version: 1, Op: gen.FaultPubGap},
		{ID: uuid(), Table: "public.outbox", Aggregate: "order/" + agg, Version: 2, Op: gen.FaultPubGap}}
	_, err := c.Exec(ctx, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
		VALUES ($1::uuid, 'order', $3, 1, 'created', $4::jsonb, '{}'::jsonb), ($2::uuid, 'order', $3, 2, 'created', $5::jsonb, '{}'::jsonb)`,
		rows[0].ID, rows[1].ID, agg, fmt.Sprintf(`{"token": %q, "v": 1}`, w.token), fmt.Sprintf(`{"token": %q, "v": 2}`, w.token))
	now := time.Now()
	var after cdc.LSN
	if err == nil {
		var s string
		if c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s) == nil {
			after, _ = cdc.ParseLSN(s)
		}
	}
	for i := range rows {
		rows[i].Committed, rows[i].LSNAfter, rows[i].Unknown = now, after, err != nil
	}
	w.addInflightRows(rows)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return check.Trim(lines[len(lines)-1], 300)
}

// brokerFault applies a restart or a memory alarm to the harness's own node and records it over the time
// it lasted, as the node saw it.
func (w *world) brokerFault(f gen.Step) {
	var from, to time.Time
	var note string
	if f.Kind == gen.FaultBrokerRestart {
		from, to, note = w.broker.RestartApp(f.Dur)
	} else {
		from, to, note = w.broker.MemoryAlarm(f.Dur)
	}
	w.rec.Event(check.Event{From: from, To: to, Kind: f.Kind, Note: note})
}

// replay plays the operator of docs/howto/handle-quarantine.md#the-commands-list-show-replay-discard-purge: it fixes the rows of the open records in
// place (headers not an object become {}; an UPDATE is no event) and replays their records, again while
// the command fails (a fault may hit it), at most three times; then it replays the other open records
// once: those of emitted messages (no row) and of events the full queue still refuses must be refused and
// stay open. A record of the mapped table's missing or unbound exchange counts as fixed while the exchange
// is there (its fix is the exchange, declared and bound again). The event's IDs are the fixed rows, which
// must arrive replayed.
func (w *world) replay() check.Event { return w.replayWhere("true") }

// replayWhere is replay of the open records that cond (SQL over cdc_router.quarantine, with args) selects.
func (w *world) replayWhere(cond string, args ...any) check.Event {
	from := time.Now()
	ctx := context.Background()
	c := w.connect(ctx)
	defer c.Close(ctx)
	rs, err := c.Query(ctx, `SELECT id, coalesce(event_id, ''), table_name, reason FROM cdc_router.quarantine
		WHERE handled_at IS NULL AND (`+cond+`) ORDER BY id`, args...)
	if err != nil {
		return check.Event{From: from, To: time.Now(), Kind: gen.CmdReplay, Note: err.Error()}
	}
	type rec struct{ id, event, table, reason string }
	var recs []rec
	for rs.Next() {
		var r rec
		var id int64
		rs.Scan(&id, &r.event, &r.table, &r.reason)
		r.id = fmt.Sprint(id)
		recs = append(recs, r)
	}
	rs.Close()
	var fixedIDs, fixedEvents, others []string
	exchangeUp := w.plan.Setup.ExchangeByTopic && !w.exchangeDown.Load()
	for _, r := range recs {
		if r.event != "" && exchangeUp && strings.Contains(r.reason, w.topicExchange()) {
			fixedIDs, fixedEvents = append(fixedIDs, r.id), append(fixedEvents, r.event)
			continue
		}
		if r.event != "" && !strings.HasPrefix(r.table, "message:") && r.table != gen.MappedTable {
			tag, err := c.Exec(ctx, `UPDATE `+r.table+` SET headers = '{}' WHERE id = $1::uuid AND jsonb_typeof(headers) <> 'object'`, r.event)
			if err == nil && tag.RowsAffected() > 0 {
				fixedIDs, fixedEvents = append(fixedIDs, r.id), append(fixedEvents, r.event)
				continue
			}
		}
		others = append(others, r.id)
	}
	e := check.Event{From: from, Kind: gen.CmdReplay, IDs: fixedEvents}
	if len(recs) == 0 {
		e.To, e.Note = time.Now(), "skipped: no open record"
		return e
	}
	var notes []string
	for try := 0; len(fixedIDs) > 0 && try < 3; try++ {
		out, code := w.cli(3*time.Minute, w.replayArgs(fixedIDs)...)
		notes = append(notes, fmt.Sprintf("%d fixed: exit %d: %s", len(fixedIDs), code, outcome(out)))
		if code == 0 {
			break
		}
		time.Sleep(time.Second)
	}
	if len(others) > 0 {
		out, code := w.cli(3*time.Minute, w.replayArgs(others)...)
		notes = append(notes, fmt.Sprintf("%d others: exit %d: %s", len(others), code, outcome(out)))
	}
	e.To, e.Note = time.Now(), strings.Join(notes, "; ")
	return e
}
