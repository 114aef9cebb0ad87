package outbox_test

import (
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/outbox"
)

// isolations are the levels a producer's transaction may run at.
var isolations = []struct {
	name string
	pgx  pgx.TxIsoLevel
	sql  sql.IsolationLevel
}{
	{"read committed", pgx.ReadCommitted, sql.LevelReadCommitted},
	{"repeatable read", pgx.RepeatableRead, sql.LevelRepeatableRead},
	{"serializable", pgx.Serializable, sql.LevelSerializable},
}

// TestConcurrentWritersGetConsecutiveVersions runs 8 writers that each commit 10 events of one aggregate,
// retrying on outbox.Retryable, at every isolation level and through both drivers. Every commit must get
// a distinct version, the versions must be exactly 1..80, and every failure must be a retryable one.
func TestConcurrentWritersGetConsecutiveVersions(t *testing.T) {
	const writers, each = 8, 10
	for _, iso := range isolations {
		for _, driver := range []string{"pgx", "database/sql"} {
			t.Run(iso.name+"/"+driver, func(t *testing.T) {
				d := newDB(t)
				var w outbox.Writer
				// txn runs one attempt: take the snapshot first (as a real transaction that read the aggregate
				// would), write, and hold the transaction open briefly so that writers overlap.
				txn := func(n int) (outbox.Written, error) {
					ev := outbox.Event{AggregateType: "order", AggregateID: "42", Type: "changed",
						Payload: fmt.Appendf(nil, `{"n": %d}`, n)}
					var got outbox.Written
					if driver == "pgx" {
						err := pgx.BeginTxFunc(d.ctx, d.pool, pgx.TxOptions{IsoLevel: iso.pgx}, func(tx pgx.Tx) error {
							if _, err := tx.Exec(d.ctx, `SELECT count(*) FROM outbox`); err != nil {
								return err
							}
							var err error
							if got, err = w.Write(d.ctx, tx, ev); err != nil {
								return err
							}
							_, err = tx.Exec(d.ctx, `SELECT pg_sleep(0.002)`)
							return err
						})
						return got, err
					}
					tx, err := d.sql.BeginTx(d.ctx, &sql.TxOptions{Isolation: iso.sql})
					if err != nil {
						return got, err
					}
					defer tx.Rollback()
					if _, err := tx.ExecContext(d.ctx, `SELECT count(*) FROM outbox`); err != nil {
						return got, err
					}
					if got, err = w.WriteSQL(d.ctx, tx, ev); err != nil {
						return got, err
					}
					if _, err := tx.ExecContext(d.ctx, `SELECT pg_sleep(0.002)`); err != nil {
						return got, err
					}
					return got, tx.Commit()
				}

				var conflicts, versionConflicts atomic.Int64
				var mu sync.Mutex
				committed := map[int64]int{} // version -> writer
				var wg sync.WaitGroup
				errs := make(chan error, writers)
				for g := range writers {
					wg.Go(func() {
						for i := range each {
							for {
								got, err := txn(g*each + i)
								if err == nil {
									mu.Lock()
									if prev, dup := committed[got.Version]; dup {
										errs <- fmt.Errorf("version %d committed twice (writers %d and %d)", got.Version, prev, g)
									}
									committed[got.Version] = g
									mu.Unlock()
									break
								}
								if !outbox.Retryable(err) {
									errs <- fmt.Errorf("writer %d: not retryable: %w", g, err)
									return
								}
								conflicts.Add(1)
								if errors.Is(err, outbox.ErrVersionConflict) {
									versionConflicts.Add(1)
								}
								if d.ctx.Err() != nil {
									errs <- d.ctx.Err()
									return
								}
							}
						}
					})
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Error(err)
				}
				got := d.versions(t, "order", "42")
				if len(got) != writers*each {
					t.Fatalf("%d events committed, want %d", len(got), writers*each)
				}
				for i, v := range got {
					if v != int64(i+1) {
						t.Fatalf("committed versions are not 1..%d: position %d holds %d", writers*each, i, v)
					}
				}
				if len(committed) != writers*each {
					t.Errorf("writers saw %d distinct versions, want %d", len(committed), writers*each)
				}
				// 8 writers overlapping on one aggregate, each transaction held open 2 ms after its write: a run
				// without a single conflict did not test the arbiter.
				if versionConflicts.Load() == 0 {
					t.Errorf("no ErrVersionConflict in %d commits of %d overlapping writers", writers*each, writers)
				}
				t.Logf("%d retries, %d of them ErrVersionConflict", conflicts.Load(), versionConflicts.Load())
			})
		}
	}
}

// TestConflictIsRetryableAndAbortsTheTransaction makes the race deterministic: transaction B writes the
// version transaction A holds. B waits for A; when A commits, B gets ErrVersionConflict (at every isolation
// level; at REPEATABLE READ and SERIALIZABLE also when A committed after B's snapshot, unseen), B's
// business change cannot commit even if B ignores the error, and B run again gets the next version. When A
// rolls back instead, B gets A's version.
func TestConflictIsRetryableAndAbortsTheTransaction(t *testing.T) {
	for _, iso := range isolations {
		t.Run(iso.name, func(t *testing.T) {
			d := newDB(t)
			ctx := d.ctx
			if _, err := d.pool.Exec(ctx, `CREATE TABLE orders (id int PRIMARY KEY)`); err != nil {
				t.Fatal(err)
			}
			var w outbox.Writer
			ev := outbox.Event{AggregateType: "order", AggregateID: "7", Type: "placed", Payload: []byte(`{}`)}
			opts := pgx.TxOptions{IsoLevel: iso.pgx}

			a, err := d.pool.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			b, err := d.pool.BeginTx(ctx, opts)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Rollback(ctx)
			if _, err := b.Exec(ctx, `INSERT INTO orders VALUES (1)`); err != nil { // B's snapshot starts before A's commit
				t.Fatal(err)
			}
			if got, err := w.Write(ctx, a, ev); err != nil || got.Version != 1 {
				t.Fatalf("A: %+v, %v; want version 1", got, err)
			}
			bDone := make(chan error, 1)
			go func() { _, err := w.Write(ctx, b, ev); bDone <- err }()
			d.waitForLockWait(t)
			if err := a.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			err = <-bDone
			if !errors.Is(err, outbox.ErrVersionConflict) || !outbox.Retryable(err) {
				t.Fatalf("B's write: %v; want ErrVersionConflict, retryable", err)
			}
			t.Logf("B's error: %v", err)
			if err := b.Commit(ctx); err == nil {
				t.Fatal("B committed after ErrVersionConflict")
			}
			var orders int
			if err := d.pool.QueryRow(ctx, `SELECT count(*) FROM orders`).Scan(&orders); err != nil || orders != 0 {
				t.Fatalf("B's business row: %d committed (%v); want none", orders, err)
			}
			// The retry, a new transaction, gets the next version.
			var got outbox.Written
			err = pgx.BeginTxFunc(ctx, d.pool, opts, func(tx pgx.Tx) error { got, err = w.Write(ctx, tx, ev); return err })
			if err != nil || got.Version != 2 {
				t.Fatalf("retry: %+v, %v; want version 2", got, err)
			}

			// A rolls back: B, waiting for A, takes A's version.
			a, _ = d.pool.BeginTx(ctx, opts)
			b, _ = d.pool.BeginTx(ctx, opts)
			if got, err := w.Write(ctx, a, ev); err != nil || got.Version != 3 {
				t.Fatalf("A: %+v, %v; want version 3", got, err)
			}
			go func() { got, err := w.Write(ctx, b, ev); bDone <- errors.Join(err, want(got.Version, 3)) }()
			d.waitForLockWait(t)
			if err := a.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			if err := <-bDone; err != nil {
				t.Fatalf("B after A rolled back: %v", err)
			}
			if err := b.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if vs := d.versions(t, "order", "7"); fmt.Sprint(vs) != "[1 2 3]" {
				t.Fatalf("versions %v, want [1 2 3]", vs)
			}
		})
	}
}

func want(got, want int64) error {
	if got != want {
		return fmt.Errorf("version %d, want %d", got, want)
	}
	return nil
}

// TestConflictThroughDatabaseSQL is the deterministic race through database/sql and pgx's stdlib driver:
// the error is recognised, and the *sql.Tx cannot commit.
func TestConflictThroughDatabaseSQL(t *testing.T) {
	d := newDB(t)
	ctx := d.ctx
	var w outbox.Writer
	ev := outbox.Event{AggregateType: "order", AggregateID: "9", Type: "placed", Payload: []byte(`{}`)}
	a, _ := d.sql.BeginTx(ctx, nil)
	b, _ := d.sql.BeginTx(ctx, nil)
	defer b.Rollback()
	if _, err := w.WriteSQL(ctx, a, ev); err != nil {
		t.Fatal(err)
	}
	bDone := make(chan error, 1)
	go func() { _, err := w.WriteSQL(ctx, b, ev); bDone <- err }()
	d.waitForLockWait(t)
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-bDone; !errors.Is(err, outbox.ErrVersionConflict) {
		t.Fatalf("B's write: %v; want ErrVersionConflict", err)
	}
	if err := b.Commit(); err == nil {
		t.Fatal("B committed after ErrVersionConflict")
	}
	if vs := d.versions(t, "order", "9"); fmt.Sprint(vs) != "[1]" {
		t.Fatalf("versions %v, want [1]", vs)
	}
}

// waitForLockWait returns once a session of the test's database waits for a lock: the second writer
// waits for the first one's version.
func (d db) waitForLockWait(t *testing.T) {
	t.Helper()
	for {
		var n int
		err := d.pool.QueryRow(d.ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND wait_event_type = 'Lock'`).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		select {
		case <-d.ctx.Done():
			t.Fatal("no writer ever waited for the other's version")
		case <-time.After(5 * time.Millisecond):
		}
	}
}
