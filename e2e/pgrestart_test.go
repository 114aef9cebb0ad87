package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestPostgresCrashMidStreamLosesNothing crashes PostgreSQL (immediate stop: the slot goes back to its
// last checkpointed position) while events stream, starts it again, and expects every committed event.
func TestPostgresCrashMidStreamLosesNothing(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	e.startStreaming()
	w := newWriter(t, e.pgURL, 50)
	w.write(2000, 20, 0)
	e.db.Close(context.Background())
	w.db.Close(context.Background())
	pg.Stop("immediate")
	time.Sleep(time.Second)
	if err := pg.Start(); err != nil {
		t.Fatal(err)
	}
	var err error
	if e.db, err = pgx.Connect(context.Background(), e.pgURL); err != nil {
		t.Fatal(err)
	}
	if w.db, err = pgx.Connect(context.Background(), e.pgURL); err != nil {
		t.Fatal(err)
	}
	w.write(2000, 20, 0)
	expectEveryEventInOrder(t, c, w, "PostgreSQL crash", 90*time.Second)
}

// TestPostgresConnectionCutMidStream cuts the router's PostgreSQL connections (replication and SQL) in the
// middle of a stream: it reconnects from the acknowledged position and loses nothing.
func TestPostgresConnectionCutMidStream(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	p := testenv.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
	direct := e.pgURL
	e.pgURL = strings.Replace(direct, fmt.Sprintf("127.0.0.1:%d", pg.Port), p.Addr, 1)
	r := e.start("")
	e.pgURL = direct
	r.waitLog("msg=streaming ", 20*time.Second)
	w := newWriter(t, e.pgURL, 50)
	wait := writeInBackground(w, 4000)
	for i := 0; i < 3; i++ {
		time.Sleep(700 * time.Millisecond)
		p.Cut()
	}
	wait()
	expectEveryEventInOrder(t, c, w, "PostgreSQL connection cut 3 times", 90*time.Second)
}
