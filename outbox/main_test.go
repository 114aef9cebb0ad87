package outbox_test

import (
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx"

	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

// pg is the throwaway PostgreSQL cluster of this test binary; each test gets its own database.
var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// db is one test's database with cdc-router's migrations applied (outbox table public.outbox), reachable
// through pgx and through database/sql.
type db struct {
	ctx  context.Context
	pool *pgxpool.Pool
	sql  *sql.DB
}

func newDB(t testing.TB) db {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	url := pg.NewDatabase(t)
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	if err := migrations.Apply(ctx, conn, migrations.Config{}); err != nil {
		t.Fatal(err)
	}
	pool, err := pgxpool.New(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	sdb, err := sql.Open("pgx", url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sdb.Close() })
	return db{ctx: ctx, pool: pool, sql: sdb}
}

// versions lists the committed versions of one aggregate in order.
func (d db) versions(t *testing.T, aggType, aggID string) []int64 {
	t.Helper()
	rows, _ := d.pool.Query(d.ctx, `SELECT aggregate_version FROM outbox WHERE aggregate_type = $1 AND aggregate_id = $2
		ORDER BY aggregate_version`, aggType, aggID)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return vs
}
