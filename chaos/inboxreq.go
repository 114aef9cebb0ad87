package chaos

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/chaos/record"
	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// inboxConsumer is the consumer of gen.CmdInboxRequests: one inbox/runner Runner at a time, in this
// process, reading its own queue (bound to the kind's aggregate type, so the other rows of the run do not
// reach it) into a projection table of the seed's database, whose inbox tables `migrate --inbox` made.
type inboxConsumer struct {
	w      *world
	queue  string
	pool   *pgxpool.Pool
	log    *slog.Logger
	cancel context.CancelFunc // of the running Runner, nil when none runs
	done   chan struct{}
}

const (
	inboxName       = "chaos"           // inbox.Config.Consumer
	inboxType       = "inboxreq"        // the kind's aggregate type: its routing keys are inboxreq.<event type>
	inboxProjection = "chaos_inbox_seq" // one row per handler run that committed
	inboxWait       = time.Minute       // how long the kind waits for the routers or the runner at each step
)

// inboxRequests plays gen.CmdInboxRequests beside the other faults (bg).
func (w *world) inboxRequests(f gen.Step, bg *sync.WaitGroup) {
	bg.Add(1)
	go func() {
		defer bg.Done()
		w.inboxRequest(f)
	}()
}

// inboxRequest: the consumer set up and started, the target aggregate's versions 1 to 4 (2 a poison row)
// and the control aggregate's written, once 3 and 4 are parked the runner stopped, the resolve of version 3
// filed as f.N says, version 2 fixed and replayed, and the runner started again (for InboxArrivedFirst, a
// runner that takes no requests first, until version 2 is applied). Every path that set the consumer up
// leaves a runner running, so that finishInbox finds every delivered event processed.
func (w *world) inboxRequest(f gen.Step) {
	from := time.Now()
	way := gen.InboxRequestWays[f.N]
	skip := func(why string) {
		w.rec.Event(check.Event{From: from, To: time.Now(), Kind: gen.CmdInboxRequests, Note: "skipped: " + check.Trim(why, 300)})
	}
	if !w.awaitStreaming(0, 30*time.Second) {
		skip("router 0 did not stream within 30 s")
		return
	}
	k, err := w.newInboxConsumer()
	if err != nil {
		skip("set up the consumer: " + err.Error())
		return
	}
	w.inbox = k
	defer k.start(true) // a no-op when one runs
	if err := k.start(true); err != nil {
		skip("start the runner: " + err.Error())
		return
	}
	n := w.nextInflight()
	target, control := fmt.Sprintf("ir%d-target", n), fmt.Sprintf("ir%d-control", n)
	rows := w.writeInboxRows(target, control)
	w.addInflightRows(rows)
	if len(rows) < 8 || rows[7].Unknown {
		skip("a row's commit failed (see the rows)")
		return
	}
	v2, v3, v4 := rows[1].ID, rows[2].ID, rows[3].ID
	if why := k.awaitParked(v2, v3, v4); why != "" {
		skip(why)
		return
	}
	k.stop()
	note := "way=" + way + "; file: "
	file := []string{"inbox", "resolve", "--consumer", inboxName, "--parked", "--note", "chaos " + way}
	switch f.N {
	case gen.InboxExpired:
		note += cmdOutcome(w.cli(time.Minute, append(file, "--wait", "1s", v3)...))
	case gen.InboxCancelled:
		out, code := w.cli(time.Minute, append(file, "--leave-filed", "--wait", "0", v3)...)
		note += cmdOutcome(out, code)
		if id := check.InboxRequestID(out); id != "" {
			list, lc := w.cli(time.Minute, "inbox", "requests", "--consumer", inboxName)
			note += fmt.Sprintf("; requests: exit %d: %s", lc, requestLine(list, id))
			note += "; cancel: " + cmdOutcome(w.cli(time.Minute, "inbox", "cancel", "--consumer", inboxName, id))
		}
	default:
		note += cmdOutcome(w.cli(time.Minute, append(file, "--leave-filed", "--wait", "1s", v3)...))
	}
	w.rec.Event(w.replayWhere("event_id = $1", v2))
	if !k.awaitDelivered(v2) {
		note += "; version 2 was not delivered within a minute of its replay"
	}
	if f.N == gen.InboxArrivedFirst {
		if err := k.start(false); err != nil || !k.awaitApplied(v2) {
			note = strings.Replace(note, "way=arrived-first", "way=left-filed", 1) + // the premise may still hold
				"; arrived-first: version 2 was not applied within a minute by the runner that takes no requests"
		}
		k.stop()
	}
	k.start(true)
	w.rec.Event(check.Event{From: from, To: time.Now(), Kind: gen.CmdInboxRequests, IDs: []string{v2, v3}, Note: note})
}

// requestLine is the line of `inbox requests`'s output that lists request id, or its last line.
func requestLine(out, id string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, id+" ") {
			return strings.Join(strings.Fields(l), " ")
		}
	}
	return lastLine(out)
}

// newInboxConsumer makes the projection table and the consumer's queue, bound before any of the kind's
// rows is written (declared as the Runner declares it). The inbox tables are setUp's: a plan with the kind
// migrates with --inbox.
func (w *world) newInboxConsumer() (*inboxConsumer, error) {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, w.directURL())
	if err != nil {
		return nil, err
	}
	k := &inboxConsumer{w: w, queue: "inbox_" + w.db, pool: pool,
		log: slog.New(slog.NewTextHandler(record.NewLogWriter(w.rec, check.InboxRouter, 0), nil))}
	w.t.Cleanup(k.close)
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS `+inboxProjection+` (seq bigserial PRIMARY KEY,
		aggregate text NOT NULL, version bigint NOT NULL, event_id text NOT NULL)`); err != nil {
		return nil, err
	}
	c, err := amqp.Dial(w.amqpURL)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return nil, err
	}
	if _, err := ch.QueueDeclare(k.queue, true, false, false, false, nil); err != nil {
		return nil, err
	}
	return k, ch.QueueBind(k.queue, inboxType+".#", w.exchange, false, nil)
}

// apply is the projection's handler: it records the event as applied, in the inbox's transaction.
func (k *inboxConsumer) apply(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO `+inboxProjection+` (aggregate, version, event_id) VALUES ($1, $2, $3)`,
		ev.AggregateType+"/"+ev.AggregateID, ev.AggregateVersion, ev.ID)
	return err
}

// start starts a Runner unless one runs; with requests false it takes no repair requests.
func (k *inboxConsumer) start(requests bool) error {
	if k.cancel != nil {
		return nil
	}
	p, err := inbox.New(k.pool, k.apply, inbox.Config{Consumer: inboxName}, k.log)
	if err != nil {
		return err
	}
	poll := 500 * time.Millisecond
	if !requests {
		poll = -1
	}
	r, err := runner.New(p, runner.Config{URLs: []string{k.w.amqpURL}, Exchange: k.w.exchange, Queue: k.queue,
		Bindings: []string{inboxType + ".#"}, Workers: 2, DrainTimeout: 5 * time.Second, RetryMax: 2 * time.Second,
		ReconnectMax: 5 * time.Second, RequestPoll: poll}, k.log)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := r.Run(ctx); err != nil {
			k.log.Error("chaos: the inbox runner ended", "error", err)
		}
	}()
	k.cancel, k.done = cancel, done
	return nil
}

// stop stops the running Runner gracefully, if one runs, and waits for it (a minute at most).
func (k *inboxConsumer) stop() {
	if k.cancel == nil {
		return
	}
	k.cancel()
	select {
	case <-k.done:
	case <-time.After(time.Minute):
		k.w.t.Errorf("the inbox runner did not stop within a minute")
	}
	k.cancel = nil
}

// close stops the runner, closes the pool and deletes the queue (the test's cleanup).
func (k *inboxConsumer) close() {
	k.stop()
	k.pool.Close()
	if c, err := amqp.Dial(k.w.amqpURL); err == nil {
		if ch, err := c.Channel(); err == nil {
			ch.QueueDelete(k.queue, false, false, false)
		}
		c.Close()
	}
}

// writeInboxRows writes the kind's rows, each version in a transaction of its own: the target aggregate's
// versions 1 to 4, version 2 a poison row (headers not a JSON object: the routers quarantine it), then the
// control aggregate's. A PostgreSQL restart or crash of the run may end the connection: the row is looked
// for and written again on a new one, for up to inboxWait. A row whose commit stays unknown is returned as
// such (the table says whether it committed), and the rows after it are not written.
func (w *world) writeInboxRows(target, control string) []check.Row {
	ctx := context.Background()
	c := w.connect(ctx)
	defer func() { c.Close(ctx) }()
	var rows []check.Row
	for _, agg := range []string{target, control} {
		for v := int64(1); v <= 4; v++ {
			r := check.Row{ID: uuid(), Table: "public.outbox", Aggregate: inboxType + "/" + agg, Version: v,
				Op: gen.CmdInboxRequests, Poison: agg == target && v == 2}
			headers := `{}`
			if r.Poison {
				headers = `[1]`
			}
			var err error
			for deadline := time.Now().Add(inboxWait); ; time.Sleep(250 * time.Millisecond) {
				if c.IsClosed() {
					c.Close(ctx)
					c = w.connect(ctx)
				}
				var n int
				if err = c.QueryRow(ctx, `SELECT count(*) FROM public.outbox WHERE id = $1::uuid`, r.ID).Scan(&n); err == nil && n == 0 {
					_, err = c.Exec(ctx, `INSERT INTO public.outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers)
						VALUES ($1::uuid, $2, $3, $4, 'created', $5::jsonb, $6::jsonb)`, r.ID, inboxType, agg, v,
						fmt.Sprintf(`{"token": %q, "v": %d}`, w.token, v), headers)
				}
				if err == nil || time.Now().After(deadline) {
					break
				}
			}
			r.Committed, r.Unknown = time.Now(), err != nil
			var s string
			if err == nil && c.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s) == nil {
				r.LSNAfter, _ = cdc.ParseLSN(s)
			}
			rows = append(rows, r)
			if err != nil {
				return rows
			}
		}
	}
	return rows
}

// awaitParked waits (inboxWait) until versions 3 and 4 of the target are parked and version 2 is
// quarantined, open; it returns why not otherwise ("" when they are).
func (k *inboxConsumer) awaitParked(v2, v3, v4 string) string {
	ctx := context.Background()
	for deadline := time.Now().Add(inboxWait); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var parked, quarantined, arrived int
		err := k.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM inbox.parked WHERE consumer = $1 AND event_id IN ($3, $4)),
			(SELECT count(*) FROM cdc_router.quarantine WHERE event_id = $2 AND handled_at IS NULL),
			(SELECT count(*) FROM inbox.inbox WHERE consumer = $1 AND event_id = $2)`, inboxName, v2, v3, v4).Scan(&parked, &quarantined, &arrived)
		switch {
		case err != nil:
		case arrived > 0:
			return "version 2 reached the inbox before the request (replayed or copied by another command of the run)"
		case parked == 2 && quarantined > 0:
			return ""
		}
	}
	return "versions 3 and 4 were not parked, with version 2 quarantined, within a minute"
}

// awaitDelivered waits (inboxWait) until the harness's consumer received id.
func (k *inboxConsumer) awaitDelivered(id string) bool {
	for deadline := time.Now().Add(inboxWait); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		if k.w.rec.Delivered()[id] {
			return true
		}
	}
	return false
}

// awaitApplied waits (inboxWait) until the projection applied event id.
func (k *inboxConsumer) awaitApplied(id string) bool {
	for deadline := time.Now().Add(inboxWait); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		var n int
		if k.pool.QueryRow(context.Background(), `SELECT count(*) FROM `+inboxProjection+` WHERE event_id = $1`, id).Scan(&n) == nil && n > 0 {
			return true
		}
	}
	return false
}

// finishInbox, once the run settled, waits (inboxWait) until the inbox has a record (or a failed one) of
// every row of the kind the harness's consumer received and no request left filed still waits, then stops
// the runner and records the inbox's state in the history.
func (w *world) finishInbox() {
	k := w.inbox
	if k == nil {
		return
	}
	ctx := context.Background()
	var ids []string
	delivered := w.rec.Delivered()
	w.inflightMu.Lock()
	for _, r := range w.inflightRows {
		if r.Op == gen.CmdInboxRequests && delivered[r.ID] {
			ids = append(ids, r.ID)
		}
	}
	w.inflightMu.Unlock()
	for deadline := time.Now().Add(inboxWait); time.Now().Before(deadline); time.Sleep(500 * time.Millisecond) {
		var missing, waiting int
		err := k.pool.QueryRow(ctx, `SELECT
			(SELECT count(*) FROM unnest($2::text[]) id WHERE NOT EXISTS (SELECT FROM inbox.inbox i WHERE i.consumer = $1 AND i.event_id = id)
				AND NOT EXISTS (SELECT FROM inbox.failed f WHERE f.consumer = $1 AND f.event_id = id)),
			(SELECT count(*) FROM inbox.requests WHERE consumer = $1 AND done_at IS NULL AND cancelled_at IS NULL
				AND (expires_at IS NULL OR expires_at > now()))`, inboxName, ids).Scan(&missing, &waiting)
		if err == nil && missing == 0 && waiting == 0 {
			break
		}
	}
	k.stop()
	f := k.read()
	w.rec.With(func(h *check.History) { h.Inbox = f })
}

// read is the inbox's state (check.InboxFinal).
func (k *inboxConsumer) read() *check.InboxFinal {
	ctx := context.Background()
	f := &check.InboxFinal{Consumer: inboxName}
	err := func() error {
		var err error
		collect := func(q string, scan func(pgx.CollectableRow) error) {
			if err != nil {
				return
			}
			var rs pgx.Rows
			if rs, err = k.pool.Query(ctx, q, inboxName); err == nil {
				_, err = pgx.CollectRows(rs, func(r pgx.CollectableRow) (struct{}, error) { return struct{}{}, scan(r) })
			}
		}
		collect(`SELECT event_id, status, received_at FROM inbox.inbox WHERE consumer = $1`, func(r pgx.CollectableRow) error {
			var x check.InboxRecord
			err := r.Scan(&x.EventID, &x.Status, &x.Received)
			f.Records = append(f.Records, x)
			return err
		})
		collect(`SELECT id, coalesce(event_id, ''), reason, detail, coalesce(resolution, '') FROM inbox.failed WHERE consumer = $1`,
			func(r pgx.CollectableRow) error {
				var x check.InboxFailed
				err := r.Scan(&x.ID, &x.EventID, &x.Reason, &x.Detail, &x.Resolution)
				f.Failed = append(f.Failed, x)
				return err
			})
		collect(`SELECT event_id FROM inbox.parked WHERE consumer = $1`, func(r pgx.CollectableRow) error {
			var id string
			err := r.Scan(&id)
			f.Parked = append(f.Parked, id)
			return err
		})
		collect(`SELECT seq, aggregate, version, event_id FROM `+inboxProjection+` WHERE $1 <> '' ORDER BY seq`, func(r pgx.CollectableRow) error {
			var x check.InboxApplied
			err := r.Scan(&x.Seq, &x.Aggregate, &x.Version, &x.EventID)
			f.Applied = append(f.Applied, x)
			return err
		})
		collect(`SELECT aggregate_type || '/' || aggregate_id, from_version, to_version, coalesce(request_id, 0), skipped_at
			FROM inbox.skipped WHERE consumer = $1`, func(r pgx.CollectableRow) error {
			var x check.InboxSkip
			err := r.Scan(&x.Aggregate, &x.From, &x.To, &x.Request, &x.At)
			f.Skipped = append(f.Skipped, x)
			return err
		})
		collect(`SELECT id, target, CASE WHEN cancelled_at IS NOT NULL THEN 'cancelled' WHEN done_at IS NOT NULL THEN 'done'
				WHEN taken_at IS NOT NULL THEN 'taken' WHEN expires_at <= now() THEN 'expired' ELSE 'waiting' END,
				taken_at IS NOT NULL, coalesce(outcome, ''), coalesce(error, '') FROM inbox.requests WHERE consumer = $1 ORDER BY id`,
			func(r pgx.CollectableRow) error {
				var x check.InboxRequest
				err := r.Scan(&x.ID, &x.Target, &x.State, &x.Taken, &x.Outcome, &x.Error)
				f.Requests = append(f.Requests, x)
				return err
			})
		return err
	}()
	if err != nil {
		f.Read = err.Error()
	}
	return f
}
