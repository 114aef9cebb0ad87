package inbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
)

// Two projections share one inbox schema and receive the same 1,000 events, each in its own shuffled
// order with four workers: each applies every event exactly once, and both projections are right.
// Keyed by event id alone (the old inbox), the second saw most events as duplicates and never applied
// them; the per-consumer checks below fail then.
func TestTwoProjectionsOnOneSchemaEachApplyEveryEvent(t *testing.T) {
	l := newLab(t)
	const aggregates, versions, workers = 50, 20, 4
	var events []inbox.Event
	balances := map[string]int64{}
	for v := int64(1); v <= versions; v++ {
		for a := range aggregates {
			id := fmt.Sprint(a)
			events = append(events, order(id, v, v*int64(a+1)))
			balances[id] += v * int64(a+1)
		}
	}
	consumers := []string{"billing", "shipping"}
	outcomes := map[string]*[inbox.Failed + 1]atomic.Int64{}
	var wg sync.WaitGroup
	for _, name := range consumers {
		if _, err := l.DB.Exec(l.Ctx, fmt.Sprintf(`CREATE TABLE projection_%[1]s (id text PRIMARY KEY,
			amount bigint NOT NULL, version bigint NOT NULL);
			CREATE TABLE applied_%[1]s (event_id text NOT NULL)`, name)); err != nil {
			t.Fatal(err)
		}
		order := rand.Perm(len(events))
		counts := new([inbox.Failed + 1]atomic.Int64)
		outcomes[name] = counts
		for w := range workers {
			p, err := inbox.New(l.Connect(), projectInto(name), inbox.Config{Consumer: name}, nil)
			if err != nil {
				t.Fatal(err)
			}
			wg.Go(func() {
				for i := w; i < len(order); i += workers {
					res, err := p.Process(l.Ctx, events[order[i]])
					for err != nil && inbox.IsTransient(err) {
						res, err = p.Process(l.Ctx, events[order[i]])
					}
					if err != nil {
						t.Errorf("%s: %v", name, err)
						return
					}
					counts[res.Outcome].Add(1)
				}
			})
		}
	}
	wg.Wait()
	for _, name := range consumers {
		applied := l.Count(fmt.Sprintf(`SELECT count(*) FROM applied_%s`, name))
		distinct := l.Count(fmt.Sprintf(`SELECT count(DISTINCT event_id) FROM applied_%s`, name))
		want(t, name+" events applied", applied, int64(len(events)))
		want(t, name+" distinct events applied", distinct, int64(len(events)))
		want(t, name+" duplicates", outcomes[name][inbox.Duplicate].Load(), 0)
		want(t, name+" inbox rows applied", l.Count(`SELECT count(*) FROM inbox.inbox
			WHERE consumer = $1 AND status = 'applied'`, name), int64(len(events)))
		want(t, name+" parked left", l.Count(`SELECT count(*) FROM inbox.parked WHERE consumer = $1`, name), 0)
		wrong := 0
		for id, amount := range balances {
			if got := l.Count(fmt.Sprintf(`SELECT coalesce((SELECT amount FROM projection_%s WHERE id = $1), 0)`, name), id); got != amount {
				wrong++
			}
		}
		want(t, name+" wrong balances", wrong, 0)
		summary(t, "consumer=%s events=%d applied=%d (processed applied=%d parked=%d duplicate=%d) wrong-balances=%d/%d",
			name, len(events), applied, outcomes[name][inbox.Applied].Load(), outcomes[name][inbox.Parked].Load(),
			outcomes[name][inbox.Duplicate].Load(), wrong, aggregates)
	}
}

// projectInto returns a handler that adds each event's delta to projection_<name>, insisting on version
// order, and logs each applied event id in applied_<name>.
func projectInto(name string) inbox.Handler {
	upsert := fmt.Sprintf(`INSERT INTO projection_%s AS p (id, amount, version) VALUES ($1, $2, $3)
		ON CONFLICT (id) DO UPDATE SET amount = p.amount + EXCLUDED.amount, version = EXCLUDED.version
		WHERE p.version = EXCLUDED.version - 1`, name)
	logApplied := fmt.Sprintf(`INSERT INTO applied_%s (event_id) VALUES ($1)`, name)
	return func(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
		var body struct{ Delta int64 }
		if err := json.Unmarshal(ev.Payload, &body); err != nil {
			return inbox.Permanent(err)
		}
		tag, err := tx.Exec(ctx, upsert, ev.AggregateID, body.Delta, ev.AggregateVersion)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return fmt.Errorf("projection_%s %s is not at version %d", name, ev.AggregateID, ev.AggregateVersion-1)
		}
		_, err = tx.Exec(ctx, logApplied, ev.ID)
		return err
	}
}
