package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

func TestPostgresIsLogicalAndRestartable(t *testing.T) {
	pg, err := StartPostgres()
	if err != nil {
		t.Fatal(err)
	}
	defer pg.Close()
	url := pg.NewDatabase(t)
	check := func() {
		ctx := context.Background()
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		var level string
		if err := c.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil || level != "logical" {
			t.Fatalf("wal_level = %q, %v; want logical", level, err)
		}
	}
	check()
	pg.Stop("immediate")
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	check()
	AMQPURL(t)
}
