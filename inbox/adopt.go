package inbox

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// AdoptRecords gives the records of the empty consumer name ("") in schema to consumer: the inbox,
// aggregate, parked and failed rows written by a version of this package without consumer names, which
// MigrateSchema keeps under that name. A consumer upgrading from such a version calls it once, before it
// processes anything under its name (or runs the SQL in docs/consumers.md). It returns how many inbox
// rows moved; a second call moves none. It refuses, changing nothing, when consumer already has a record
// with the same key.
//
// If two projections shared the schema before the upgrade, their records are mixed (each swallowed some
// of the other's events): adopt them for one, and rebuild or Repair the other from the source.
func AdoptRecords(ctx context.Context, conn Execer, schema, consumer string) (int64, error) {
	if err := (Config{Consumer: consumer, Schema: schema}).Defaults().Validate(); err != nil {
		return 0, fmt.Errorf("adopt inbox records: %w", err)
	}
	sql := inSchema(`WITH a AS (UPDATE {schema}.aggregate SET consumer = $1 WHERE consumer = ''),
		p AS (UPDATE {schema}.parked SET consumer = $1 WHERE consumer = ''),
		f AS (UPDATE {schema}.failed SET consumer = $1 WHERE consumer = '')
		UPDATE {schema}.inbox SET consumer = $1 WHERE consumer = ''`, (Config{Schema: schema}).Defaults().Schema)
	tag, err := conn.Exec(ctx, sql, consumer)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "23505" {
		return 0, fmt.Errorf("adopt inbox records for consumer %q: it already has records with the same keys "+
			"(it ran under this name before adopting); nothing was moved: adopt before the first run, or "+
			"rebuild this projection: %w", consumer, err)
	}
	if err != nil {
		return 0, fmt.Errorf("adopt inbox records for consumer %q: %w", consumer, err)
	}
	return tag.RowsAffected(), nil
}
