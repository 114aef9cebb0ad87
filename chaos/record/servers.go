package record

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// Connect connects to url, retrying for a minute while PostgreSQL restarts.
func Connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		c, err := pgx.Connect(context.Background(), url)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			t.Fatalf("connect: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Quarantine is the quarantine table of the database at url.
func Quarantine(t testing.TB, url string) []check.Quarantined {
	t.Helper()
	ctx := context.Background()
	c := Connect(t, url)
	defer c.Close(ctx)
	rs, err := c.Query(ctx, `SELECT id, coalesce(event_id, ''), reason, coalesce(handled_how, ''), quarantined_at FROM cdc_router.quarantine`)
	if err != nil {
		t.Fatalf("read the quarantine: %v", err)
	}
	defer rs.Close()
	var qs []check.Quarantined
	for rs.Next() {
		var q check.Quarantined
		rs.Scan(&q.ID, &q.EventID, &q.Reason, &q.Handled, &q.At)
		qs = append(qs, q)
	}
	return qs
}

// Acked is the confirmed_flush_lsn of each slot of database db, read through url.
func Acked(t testing.TB, url, db string) map[string]cdc.LSN {
	t.Helper()
	ctx := context.Background()
	c := Connect(t, url)
	defer c.Close(ctx)
	rs, err := c.Query(ctx, `SELECT slot_name, coalesce(confirmed_flush_lsn::text, '0/0') FROM pg_replication_slots WHERE database = $1`, db)
	if err != nil {
		t.Fatalf("read the slots: %v", err)
	}
	defer rs.Close()
	m := map[string]cdc.LSN{}
	for rs.Next() {
		var slot, lsn string
		rs.Scan(&slot, &lsn)
		m[slot], _ = cdc.ParseLSN(lsn)
	}
	return m
}
