package inbox_test

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// Migrate may run at every start, from several consumers at once, into any schema.
func TestMigrateIsIdempotentAndConcurrent(t *testing.T) {
	ctx := ctxFor(t)
	url := pg.NewDatabase(t)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			c, err := pgx.Connect(ctx, url)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close(context.Background())
			errs <- inbox.MigrateSchema(ctx, c, "Billing Inbox")
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, tx); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inbox.Migrate(ctx, c); err != nil {
		t.Fatal(err)
	}
	var tables int
	err = c.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables
		WHERE table_schema IN ('inbox', 'Billing Inbox') AND table_name IN ('inbox', 'aggregate', 'parked', 'failed')`).Scan(&tables)
	if err != nil {
		t.Fatal(err)
	}
	want(t, "tables in both schemas", tables, 8)

	p, err := inbox.New(c, func(context.Context, pgx.Tx, inbox.Event) error { return nil },
		inbox.Config{Consumer: "billing", Schema: "Billing Inbox"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Process(ctx, order("1", 1, 1))
	if err != nil {
		t.Fatal(err)
	}
	want(t, "outcome in a custom schema", res.Outcome, inbox.Applied)
	summary(t, "migrations=7 (4 concurrent) schemas=2 tables=%d", tables)
}
