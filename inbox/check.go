package inbox

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotMigrated reports inbox tables that are missing, or from a version without consumer names.
var ErrNotMigrated = errors.New("inbox tables missing or out of date")

// checkTimeout bounds the check New makes, which has no context of its own.
const checkTimeout = 10 * time.Second

// Check verifies that the inbox tables of Config.Schema exist in the form this version needs (and are
// visible to this role), and returns ErrNotMigrated with the fix otherwise, so that a consumer stops at
// its start instead of requeueing every event on SQLSTATE 42P01. It logs a warning when the schema holds
// records from before consumer names (the empty consumer name), which AdoptRecords gives to their consumer. New
// calls it.
func (p *Processor) Check(ctx context.Context) error {
	tx, err := p.db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("check inbox tables: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	var n int
	if err := tx.QueryRow(ctx, p.q.check, p.cfg.Schema).Scan(&n); err != nil {
		return fmt.Errorf("check inbox tables: %w", err)
	}
	if n != checkColumns {
		return fmt.Errorf("%w in schema %q: run inbox.MigrateSchema(ctx, conn, %q) (inbox.Migrate for the "+
			"default schema) or `cdc-router migrate --inbox --inbox-schema %s` once, then start the consumer; "+
			"when upgrading, see docs/consumers.md (AdoptRecords)", ErrNotMigrated, p.cfg.Schema, p.cfg.Schema,
			p.cfg.Schema)
	}
	var unnamed bool
	if err := tx.QueryRow(ctx, p.q.unnamed).Scan(&unnamed); err != nil {
		return fmt.Errorf("check inbox tables: %w", err)
	}
	if unnamed {
		p.log.Warn("inbox schema holds records from before consumer names; if they are this consumer's, "+
			"call inbox.AdoptRecords once (docs/consumers.md)", "schema", p.cfg.Schema, "consumer", p.consumer)
	}
	return nil
}
