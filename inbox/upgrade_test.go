package inbox_test

import (
	"context"
	_ "embed" // testdata/schema_v1.sql
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// schemaV1 is the inbox schema before consumer names, as released.
//
//go:embed testdata/schema_v1.sql
var schemaV1 string

// An inbox from before consumer names is upgraded in place: its rows belong to the empty consumer name
// until AdoptRecords gives them to one, after which the consumer carries on where it stood (its parked
// event applies when the gap closes); New refuses the old schema with the fix.
func TestMigrateUpgradesAnInboxWithoutConsumerNames(t *testing.T) {
	l := newBareLab(t)
	if _, err := l.DB.Exec(l.Ctx, strings.ReplaceAll(schemaV1, "{schema}", "inbox")); err != nil {
		t.Fatalf("old schema: %v", err)
	}
	e3, e5 := order("42", 3, 1), order("42", 5, 100)
	for _, st := range []struct {
		sql  string
		args []any
	}{
		{`INSERT INTO inbox.inbox (event_id, fingerprint, aggregate_type, aggregate_id, aggregate_version, status)
			VALUES ($1, $2, 'order', '42', 3, 'applied'), ($3, $4, 'order', '42', 5, 'parked')`,
			[]any{e3.ID, e3.Fingerprint(), e5.ID, e5.Fingerprint()}},
		{`INSERT INTO inbox.aggregate (aggregate_type, aggregate_id, applied_version) VALUES ('order', '42', 3)`, nil},
		{`INSERT INTO inbox.parked (event_id, aggregate_type, aggregate_id, aggregate_version, event_type,
			schema_version, backfill, payload, headers) VALUES ($1, 'order', '42', 5, $2, 1, false, $3, '{}')`,
			[]any{e5.ID, e5.Type, e5.Payload}},
		{`INSERT INTO inbox.failed (event_id, reason, detail) VALUES ('x', 'permanent', 'old failure')`, nil},
		{`INSERT INTO projection (id, amount, version) VALUES ('42', 3, 3)`, nil},
	} {
		if _, err := l.DB.Exec(l.Ctx, st.sql, st.args...); err != nil {
			t.Fatalf("old rows: %v", err)
		}
	}
	_, err := inbox.New(l.DB, l.Handle, inbox.Config{Consumer: "orders-projection"}, nil)
	if !errors.Is(err, inbox.ErrNotMigrated) || !strings.Contains(err.Error(), "inbox.MigrateSchema") {
		t.Fatalf("New on the old schema = %v, want ErrNotMigrated naming inbox.MigrateSchema", err)
	}
	for range 2 {
		if err := inbox.Migrate(l.Ctx, l.DB); err != nil {
			t.Fatalf("upgrade: %v", err)
		}
	}
	for table, pk := range map[string]string{"inbox": "PRIMARY KEY (consumer, event_id)",
		"aggregate": "PRIMARY KEY (consumer, aggregate_type, aggregate_id)", "parked": "PRIMARY KEY (consumer, event_id)"} {
		var def string
		if err := l.DB.QueryRow(l.Ctx, `SELECT pg_get_constraintdef(oid) FROM pg_constraint
			WHERE conrelid = ('inbox.' || $1)::regclass AND contype = 'p'`, table).Scan(&def); err != nil {
			t.Fatal(err)
		}
		want(t, table+" primary key", def, pk)
	}
	want(t, "unnamed rows", l.Count(`SELECT (SELECT count(*) FROM inbox.inbox WHERE consumer = '')
		+ (SELECT count(*) FROM inbox.failed WHERE consumer = '')`), 3)

	p := l.Processor(inbox.Config{})
	moved, err := inbox.AdoptRecords(l.Ctx, l.DB, inbox.DefaultSchema, "orders-projection")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "inbox rows adopted", moved, 2)
	again, err := inbox.AdoptRecords(l.Ctx, l.DB, inbox.DefaultSchema, "orders-projection")
	if err != nil {
		t.Fatal(err)
	}
	want(t, "adopted again", again, 0)
	res, err := p.Process(l.Ctx, e3)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "adopted E3 again", res.Outcome, inbox.Duplicate)
	res, err = p.Process(l.Ctx, order("42", 4, 10))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "E4 closes the adopted gap", res, inbox.Result{Outcome: inbox.Applied, Version: 5, Unparked: 1})
	want(t, "amount", l.Amount("42"), 113)
	want(t, "failed row adopted", l.Count(`SELECT count(*) FROM inbox.failed WHERE consumer = 'orders-projection'`), 1)
	summary(t, "old rows=5 migrations=2 adopted=%d then=0 E3=duplicate E4=applied unparked=1 amount=%d", moved, l.Amount("42"))
}

// A migration of an up-to-date schema takes no table lock, so a consumer starting while another one's
// transaction is stuck does not queue a lock request that would stall every consumer behind it.
func TestMigrateOfAnUpToDateSchemaTakesNoLock(t *testing.T) {
	l := newLab(t)
	stuck, err := l.Connect().Begin(l.Ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Rollback(context.Background())
	if _, err := stuck.Exec(l.Ctx, `INSERT INTO inbox.aggregate (consumer, aggregate_type, aggregate_id)
		VALUES ('c', 'order', '1'); LOCK TABLE inbox.inbox, inbox.parked, inbox.failed, inbox.attempts IN ROW EXCLUSIVE MODE`); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(l.Ctx, 5*time.Second)
	defer cancel()
	begun := time.Now()
	if err := inbox.Migrate(ctx, l.Connect()); err != nil {
		t.Fatalf("Migrate beside a stuck transaction: %v", err)
	}
	summary(t, "migrate beside a transaction holding row-exclusive locks on every table took %s",
		time.Since(begun).Round(time.Millisecond))
}

// New refuses a schema without the inbox tables, naming the fix, instead of requeueing every event on
// SQLSTATE 42P01.
func TestNewRefusesMissingTables(t *testing.T) {
	ctx := ctxFor(t)
	c, err := pgx.Connect(ctx, pg.NewDatabase(t))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	_, err = inbox.New(c, func(context.Context, pgx.Tx, inbox.Event) error { return nil },
		inbox.Config{Consumer: "billing", Schema: "billing"}, nil)
	if !errors.Is(err, inbox.ErrNotMigrated) || !strings.Contains(err.Error(), `cdc-router migrate --inbox --inbox-schema billing`) {
		t.Fatalf("New without tables = %v, want ErrNotMigrated naming the fix", err)
	}
	summary(t, "refusal: %v", err)
}
