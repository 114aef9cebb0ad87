package snapshot

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Quarantined counts the rows of job that went to the quarantine instead of the broker: the records of its
// slot (the job's name) at its read position, which every record of a copied row carries as its commit_lsn,
// whether the row could not become an event or the broker refused it. So it counts this run of the job (a
// resumed one included), not an earlier run of the same name, and RowsDone minus it were published.
func Quarantined(ctx context.Context, conn *pgx.Conn, schema string, job Job) (int64, error) {
	var n int64
	err := conn.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{schema, "quarantine"}.Sanitize()+
		` WHERE slot = $1 AND commit_lsn = $2::pg_lsn`, job.Name, job.ReadLSN.String()).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("count the rows %s quarantined: %w", job.Name, err)
	}
	return n, nil
}
