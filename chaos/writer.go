package chaos

import (
	"context"
	"crypto/rand"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// writer runs one writer's operations on its own connection, straight to PostgreSQL. It owns its
// aggregates (w<writer>-<n>) and gives each the next version, so versions are commit order per aggregate.
// A failed transaction is not retried: the writer reconnects and goes on with the next versions.
type writer struct {
	w        *world
	n        int
	rng      *mrand.Rand
	erng     *mrand.Rand // emitted events' choices (gen.Setup.Emit), apart so that rng's stay what they were
	prng     *mrand.Rand // partitions' choices (gen.Setup.Partitioned), apart for the same reason
	conn     *pgx.Conn
	intruder *pgx.Conn // the role without EXECUTE on emit, for gen.OpForged
	versions map[string]int64
	txn      int
	rows     []check.Row // every row attempted; the tables say which committed
}

const aggregatesPerWriter = 8

func newWriter(w *world, n int) *writer {
	return &writer{w: w, n: n, rng: mrand.New(mrand.NewPCG(uint64(w.plan.Setup.Seed), uint64(n)+1)),
		erng: mrand.New(mrand.NewPCG(uint64(w.plan.Setup.Seed), 0xe417+uint64(n))),
		prng: mrand.New(mrand.NewPCG(uint64(w.plan.Setup.Seed), 0x9a47+uint64(n))), versions: map[string]int64{}}
}

func (wr *writer) run(ctx context.Context, start time.Time, ops []gen.Step) {
	for _, op := range ops {
		if d := time.Until(start.Add(op.At)); d > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(d):
			}
		}
		if ctx.Err() != nil {
			return
		}
		wr.do(ctx, op)
	}
}

// do runs op as one transaction, reconnecting first if needed.
func (wr *writer) do(ctx context.Context, op gen.Step) {
	if op.Kind == gen.OpForged {
		rows, calls := wr.forge(ctx, op)
		now := time.Now()
		for i := range rows {
			rows[i].Committed = now
		}
		wr.rows = append(wr.rows, rows...)
		for _, c := range calls {
			wr.w.rec.Event(check.Event{From: now, To: now, Kind: check.KindIntruderEmit, Note: c})
		}
		return
	}
	for wr.conn == nil {
		if err := wr.connect(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	if op.Kind == gen.OpDelete && !wr.w.plan.DeleteDuringSnapshot && !wr.w.allStreamed() {
		op.Kind = gen.OpMulti // see Plan.DeleteDuringSnapshot
	}
	wr.txn++
	rows := wr.rowsFor(op)
	err := wr.write(ctx, op, rows)
	now := time.Now()
	var after cdc.LSN
	if err == nil {
		var s string
		if err = wr.conn.QueryRow(ctx, `SELECT pg_current_wal_lsn()::text`).Scan(&s); err == nil {
			after, _ = cdc.ParseLSN(s)
		}
	}
	for i := range rows {
		rows[i].Committed, rows[i].LSNAfter, rows[i].Unknown = now, after, err != nil
	}
	wr.rows = append(wr.rows, rows...)
	if op.Kind == gen.OpHuge && err == nil {
		wr.w.hugeAt = now
		close(wr.w.hugeCommitted)
	}
	if err != nil {
		wr.conn.Close(context.Background())
		wr.conn = nil
	}
}

// connect connects again. The versions stay where they are: every version the writer ever tried is
// spent, whether its transaction committed, failed or is unknown (a gap is fine; a reused version would
// be two events at one version, and a row deleted by its own transaction leaves no trace in the table).
func (wr *writer) connect(ctx context.Context) error {
	url := wr.w.directURL()
	if wr.w.plan.Setup.Emit {
		url = wr.w.roleURL(wr.w.writerRole())
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	wr.conn = c
	return nil
}

// rowsFor chooses op's rows: their table, aggregate and next version (from the writer's own generator).
func (wr *writer) rowsFor(op gen.Step) []check.Row {
	tables := wr.w.plan.Setup.Tables
	n := max(op.N, 1)
	one := fmt.Sprintf("w%d-%d", wr.n, wr.rng.IntN(aggregatesPerWriter))
	rows := make([]check.Row, n)
	for i := range rows {
		agg := one
		if op.Kind != gen.OpBurst && op.Kind != gen.OpHuge {
			agg = fmt.Sprintf("w%d-%d", wr.n, wr.rng.IntN(aggregatesPerWriter))
		}
		poison, tooBig := op.Kind == gen.OpPoison && i == 0, op.Kind == gen.OpTooBig && i == 0
		refused := op.Kind == gen.OpRefused && i == 0 || tooBig
		internal := op.Kind == gen.OpInternal && i == 0
		refused = refused || internal
		later := op.Kind == gen.OpRefused && i > 0 // a later version of the refused row's aggregate (gen's addRefusals)
		if later {
			agg = strings.TrimPrefix(rows[0].Aggregate, "order/") // the draws above stay, so the rest of the plan does
		}
		table, aggregate := tables[wr.rng.IntN(len(tables))], "order/"+agg
		switch {
		case internal:
			table, aggregate = gen.MappedTable, gen.InternalExchange+"/"+agg // its topic names the internal exchange
		case table == gen.MappedTable && (poison || refused || later):
			table = tables[0] // the native shape's refusals: headers not an object, the full queue's routing key, the payload
		case table == gen.MappedTable:
			aggregate = mappedType + "/" + agg
		}
		wr.versions[aggregate]++
		rows[i] = check.Row{ID: uuid(), Table: table, Aggregate: aggregate,
			Version: wr.versions[aggregate], Txn: wr.txn, Op: op.Kind, Poison: poison, Deleted: op.Kind == gen.OpDelete,
			Refused: refused, TooBig: tooBig}
		if op.Kind == gen.OpEmit && wr.erng.IntN(2) == 0 {
			rows[i].Emitted, rows[i].Table = true, "message:"+messagePrefix
		}
	}
	return rows
}

// write inserts rows in one transaction, in their order (versions ascending per aggregate, so the insert
// order is the commit order the checker expects): each run of rows of one table by one COPY for OpCopy,
// by one INSERT … SELECT FROM unnest otherwise.
func (wr *writer) write(ctx context.Context, op gen.Step, rows []check.Row) error {
	return pgx.BeginFunc(ctx, wr.conn, func(tx pgx.Tx) error {
		for i := 0; i < len(rows); {
			j := i + 1
			for j < len(rows) && rows[j].Table == rows[i].Table {
				j++
			}
			var err error
			switch {
			case rows[i].Emitted:
				err = wr.emitRows(ctx, tx, rows[i:j])
			case rows[i].Table == gen.MappedTable:
				err = wr.insertMapped(ctx, tx, rows[i:j], op.Kind == gen.OpCopy)
			case op.Kind == gen.OpCopy:
				err = wr.copyRows(ctx, tx, rows[i].Table, rows[i:j])
			default:
				err = wr.insertRows(ctx, tx, rows[i].Table, rows[i:j])
			}
			if err != nil {
				return err
			}
			i = j
		}
		if op.Kind == gen.OpDelete {
			for _, t := range wr.w.plan.Setup.Tables {
				ids := make([]string, len(rows))
				for k, r := range rows {
					ids[k] = r.ID
				}
				if _, err := tx.Exec(ctx, `DELETE FROM `+t+` WHERE id = ANY($1::uuid[])`, ids); err != nil {
					return err
				}
			}
		}
		return nil
	})
}

func (wr *writer) values(r check.Row) (id, aggID, event, payload, headers string) {
	headers = `{"writer": "` + fmt.Sprint(wr.n) + `"}`
	event = "created"
	if r.Poison {
		headers, event = `[1]`, "poison" // not a JSON object: the router must quarantine the row
	}
	payload = fmt.Sprintf(`{"token": %q, "v": %d}`, wr.w.token, r.Version)
	switch {
	case r.TooBig:
		// Over the node's max_message_size, under the routers' --max-payload-bytes: RabbitMQ refuses it.
		payload = fmt.Sprintf(`{"token": %q, "v": %d, "pad": %q}`, wr.w.token, r.Version, strings.Repeat("p", gen.TooBigPayload))
	case r.Refused:
		event = "refused" // routing key order.refused: the full queue nacks it
	}
	return r.ID, strings.TrimPrefix(r.Aggregate, "order/"), event, payload, headers
}

// insertRows inserts rs by one INSERT … SELECT FROM unnest; a row the partitions choose for (occurredAt)
// gets an occurred_at in that partition's range, the others now().
func (wr *writer) insertRows(ctx context.Context, tx pgx.Tx, table string, rs []check.Row) error {
	cols := make([][]string, 5)
	var versions []int64
	var at []*time.Time
	for k, r := range rs {
		id, agg, ev, pl, hd := wr.values(r)
		for i, v := range []string{id, agg, ev, pl, hd} {
			cols[i] = append(cols[i], v)
		}
		versions = append(versions, r.Version)
		g, t := wr.occurredAt()
		rs[k].Partition = g + 1
		at = append(at, t)
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+table+` (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload, headers, occurred_at)
		SELECT i::uuid, 'order', a, v, e, p::jsonb, h::jsonb, coalesce(o, now())
		FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[], $7::timestamptz[]) AS u(i, a, v, e, p, h, o)`,
		cols[0], cols[1], versions, cols[2], cols[3], cols[4], at)
	return err
}

func (wr *writer) copyRows(ctx context.Context, tx pgx.Tx, table string, rs []check.Row) error {
	src := make([][]any, len(rs))
	for i, r := range rs {
		id, agg, ev, pl, hd := wr.values(r)
		src[i] = []any{id, "order", agg, r.Version, ev, pl, hd}
	}
	schema, name, _ := strings.Cut(table, ".")
	_, err := tx.CopyFrom(ctx, pgx.Identifier{schema, name},
		[]string{"id", "aggregate_type", "aggregate_id", "aggregate_version", "event_type", "payload", "headers"}, pgx.CopyFromRows(src))
	return err
}

func uuid() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// insertMapped inserts rs into gen.MappedTable, in Debezium's shape, by COPY or by one INSERT … SELECT FROM
// unnest.
func (wr *writer) insertMapped(ctx context.Context, tx pgx.Tx, rs []check.Row, copy bool) error {
	cols := make([][]string, 4)
	var versions []int64
	var types []string
	src := make([][]any, len(rs))
	for k, r := range rs {
		id, agg, ev, pl, _ := wr.values(r)
		for i, v := range []string{id, agg, ev, pl} {
			cols[i] = append(cols[i], v)
		}
		versions = append(versions, r.Version)
		src[k] = []any{id, wr.w.mappedTypeOf(r), agg, ev, r.Version, pl}
		types = append(types, wr.w.mappedTypeOf(r))
	}
	if copy {
		_, err := tx.CopyFrom(ctx, pgx.Identifier{"public", "events_mapped"},
			[]string{"id", "aggregatetype", "aggregateid", "type", "version", "payload"}, pgx.CopyFromRows(src))
		return err
	}
	_, err := tx.Exec(ctx, `INSERT INTO `+gen.MappedTable+` (id, aggregatetype, aggregateid, type, version, payload)
		SELECT i::uuid, t, a, e, v, p::jsonb FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[]) AS u(i, a, v, e, p, t)`,
		cols[0], cols[1], versions, cols[2], cols[3], types)
	return err
}
