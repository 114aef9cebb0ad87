package chaos

import (
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/cdc-router/cdc-router/migrations"
)

// columns are the extra columns of public.outbox that gen.FaultColumn adds and drops: changes the router
// must not notice (docs/howto/change-the-outbox-schema.md#what-each-change-does: extra columns are ignored). The
// writers name their columns, so an extra one takes its default.
type columns struct {
	mu    sync.Mutex
	n     int      // columns added so far (their names are chaos_extra_<i>)
	added []string // columns present now, oldest first
}

// columnChange applies change c (gen.Step.N) to public.outbox: 0 adds a nullable text column, 1 adds a NOT
// NULL column with a default, 2 drops the oldest extra column, 3 makes the newest one nullable (DROP NOT
// NULL) or NOT NULL with a default (SET DEFAULT, then SET NOT NULL once no row holds a NULL in it). It
// returns a note on what it did.
func (w *world) columnChange(c int) string {
	w.cols.mu.Lock()
	defer w.cols.mu.Unlock()
	name := fmt.Sprintf("chaos_extra_%d", w.cols.n)
	var stmts []string
	switch {
	case c == 0:
		stmts = []string{`ALTER TABLE public.outbox ADD COLUMN ` + name + ` text`}
	case c == 1:
		stmts = []string{`ALTER TABLE public.outbox ADD COLUMN ` + name + ` boolean NOT NULL DEFAULT false`}
	case len(w.cols.added) == 0:
		return "skipped: no extra column"
	case c == 2:
		name = w.cols.added[0]
		stmts = []string{`ALTER TABLE public.outbox DROP COLUMN ` + name}
	default:
		name = w.cols.added[len(w.cols.added)-1]
		stmts = []string{`DO $$ BEGIN
			IF (SELECT attnotnull FROM pg_attribute WHERE attrelid = 'public.outbox'::regclass AND attname = '` + name + `') THEN
				ALTER TABLE public.outbox ALTER COLUMN ` + name + ` DROP NOT NULL;
			ELSE
				ALTER TABLE public.outbox ALTER COLUMN ` + name + ` SET DEFAULT 'x';
				IF NOT EXISTS (SELECT FROM public.outbox WHERE ` + name + ` IS NULL) THEN
					ALTER TABLE public.outbox ALTER COLUMN ` + name + ` SET NOT NULL;
				END IF;
			END IF;
		END $$`}
	}
	if err := w.ddl(stmts...); err != nil {
		return fmt.Sprintf("%s: %v", name, err)
	}
	switch c {
	case 0, 1:
		w.cols.n++
		w.cols.added = append(w.cols.added, name)
	case 2:
		w.cols.added = w.cols.added[1:]
	}
	return fmt.Sprintf("%s: %s", name, []string{"added, nullable", "added, NOT NULL DEFAULT false", "dropped", "nullability changed"}[c])
}

// drift retypes public.outbox's headers to text for d, a change the router must notice
// (docs/howto/change-the-outbox-schema.md#what-each-change-does), then restores it as the docs' safe procedure says:
// restore the column, then start the routers (once, but it may stay set) with --on-drift=quarantine. A
// router without the flag refuses the first row written meanwhile and exits naming that fix; its
// supervisor's next start has the flag (w.drifted). The restore is tried until it takes: left undone,
// every later row would be quarantined. The rows written meanwhile decode as written, with text headers:
// quarantined with the drift as the reason.
func (w *world) drift(d time.Duration) string {
	w.cols.mu.Lock() // no column change in between
	defer w.cols.mu.Unlock()
	if err := w.ddl(`ALTER TABLE public.outbox ALTER COLUMN headers TYPE text`); err != nil {
		return "headers to text: " + err.Error()
	}
	time.Sleep(d)
	var err error
	for range 10 {
		// pgx's COPY describes a table once per connection and sends jsonb's binary form (a version
		// byte, 1, then the text) to the column it still takes for jsonb: a COPY while the column was
		// text stored that byte too. The restore drops it, as the writers' operator would have to.
		if err = w.ddl(`ALTER TABLE public.outbox ALTER COLUMN headers TYPE jsonb
			USING (CASE WHEN left(headers, 1) = chr(1) THEN substr(headers, 2) ELSE headers END)::jsonb`); err == nil {
			w.drifted.Store(true)
			return "headers text, then jsonb again"
		}
		time.Sleep(time.Second)
	}
	w.t.Errorf("column-drift: restoring public.outbox.headers: %v", err)
	return "headers to text, not restored: " + err.Error()
}

// otherTable is the second FaultDrift (N=1): another table, public.chaos_other, added to the routers'
// publications (each shard's) for d and written three times meanwhile, then removed, as
// docs/howto/change-the-outbox-schema.md#what-each-change-does says: `ALTER PUBLICATION … DROP TABLE other`, then start
// once with --on-drift=quarantine (w.drifted). A router without the flag stops before the other table's first
// row, naming the fix; with it the rows are quarantined (they are no events: the checker knows none of them).
func (w *world) otherTable(d time.Duration) string {
	add := []string{`CREATE TABLE IF NOT EXISTS public.chaos_other (id bigserial PRIMARY KEY, note text)`}
	var drop []string
	for _, pub := range w.publications() {
		add = append(add, `ALTER PUBLICATION `+pub+` ADD TABLE public.chaos_other`)
		drop = append(drop, `ALTER PUBLICATION `+pub+` DROP TABLE public.chaos_other`)
	}
	if err := w.ddl(add...); err != nil {
		return "add public.chaos_other: " + err.Error()
	}
	var notes []string
	for i := range 3 {
		if err := w.ddl(fmt.Sprintf(`INSERT INTO public.chaos_other (note) VALUES ('not an event %d')`, i)); err != nil {
			notes = append(notes, "insert: "+err.Error())
		}
		time.Sleep(d / 3)
	}
	var err error
	for range 10 {
		if err = w.ddl(drop...); err == nil {
			w.drifted.Store(true)
			return strings.Join(append([]string{"public.chaos_other in the publication, 3 rows, then out"}, notes...), "; ")
		}
		time.Sleep(time.Second)
	}
	w.t.Errorf("column-drift: removing public.chaos_other from the publication: %v", err)
	return "public.chaos_other in the publication, not removed: " + err.Error()
}

// publications are the routers' publications: cdc_router_outbox, or with shards each shard's.
func (w *world) publications() []string {
	n := w.plan.Setup.Shards
	if n == 0 {
		return []string{"cdc_router_outbox"}
	}
	pubs := make([]string, n)
	for i := range n {
		pubs[i] = migrations.ShardPublication("cdc_router_outbox", i, n)
	}
	return pubs
}
