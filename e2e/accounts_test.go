package e2e

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// accountsSQL is the business side of the end-to-end test: accounts with a balance and a version, and a
// ledger of every deposit and withdrawal, written with the outbox row in one transaction.
const accountsSQL = `CREATE TABLE accounts (
    id      text PRIMARY KEY,
    balance bigint NOT NULL CHECK (balance >= 0),
    version bigint NOT NULL
);
CREATE TABLE ledger (
    account_id text   NOT NULL,
    version    bigint NOT NULL,
    amount     bigint NOT NULL,
    PRIMARY KEY (account_id, version)
);`

// errLostRace is a conditional update that changed no row: another writer moved the account first.
var errLostRace = errors.New("the account changed since it was read")

// accountsWriter changes accounts the producer way of docs/producers.md: read the account, decide,
// update it only at the version read (exactly one row), and write the event at version + 1 in the same
// transaction. A lost race is decided again; a lost connection is dialled again.
type accountsWriter struct {
	url      string
	accounts int
	pause    time.Duration

	committed, lostRaces, reconnects atomic.Int64
	mu                               sync.Mutex
	lastErr                          error
}

func accountID(i int) string { return fmt.Sprintf("acct-%03d", i) }

// run starts workers writers until ctx is cancelled; wait returns when they have stopped.
func (w *accountsWriter) run(ctx context.Context, workers int) (wait func()) {
	var wg sync.WaitGroup
	for i := range workers {
		wg.Go(func() { w.loop(ctx, mrand.New(mrand.NewPCG(uint64(i), 7))) })
	}
	return wg.Wait
}

func (w *accountsWriter) loop(ctx context.Context, rng *mrand.Rand) {
	var db *pgx.Conn
	defer func() {
		if db != nil {
			db.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if db == nil {
			var err error
			if db, err = pgx.Connect(ctx, w.url); err != nil {
				w.note(err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		// A third of the changes go to five hot accounts, so that writers race for them.
		id := accountID(rng.IntN(w.accounts))
		if rng.IntN(3) == 0 {
			id = accountID(rng.IntN(5))
		}
		err := w.change(ctx, db, id, rng)
		for errors.Is(err, errLostRace) {
			w.lostRaces.Add(1)
			err = w.change(ctx, db, id, rng)
		}
		switch {
		case err == nil:
			w.committed.Add(1)
		case ctx.Err() == nil:
			// The outcome of a commit cut off is unknown; the next change reads the account again, so
			// either way the table and the outbox agree.
			w.note(err)
			w.reconnects.Add(1)
			db.Close(context.Background())
			db = nil
		}
		time.Sleep(w.pause)
	}
}

func (w *accountsWriter) note(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.lastErr = err
}

func (w *accountsWriter) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

// change deposits, or withdraws when the balance allows, a random amount.
func (w *accountsWriter) change(ctx context.Context, db *pgx.Conn, id string, rng *mrand.Rand) error {
	var balance, version int64
	if err := db.QueryRow(ctx, `SELECT balance, version FROM accounts WHERE id = $1`, id).Scan(&balance, &version); err != nil {
		return err
	}
	amount := 1 + rng.Int64N(100)
	kind, delta := "deposited", amount
	if balance >= amount && rng.IntN(2) == 0 {
		kind, delta = "withdrawn", -amount
	}
	if rng.IntN(4) == 0 {
		time.Sleep(time.Duration(rng.IntN(5)) * time.Millisecond) // a decision that takes a while
	}
	return pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE accounts SET balance = balance + $3, version = version + 1
			WHERE id = $1 AND version = $2`, id, version, delta)
		if err != nil {
			return err
		}
		if tag.RowsAffected() != 1 {
			return errLostRace
		}
		if _, err := tx.Exec(ctx, `INSERT INTO ledger (account_id, version, amount) VALUES ($1, $2, $3)`,
			id, version+1, delta); err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			VALUES ($1, 'account', $2, $3, $4, jsonb_build_object('amount', $5::bigint))`,
			uuid(), id, version+1, kind, amount)
		return err
	})
}

// consumerBinary is internal/e2e/accountsconsumer, built with -race as the router under test is.
func consumerBinary(t testing.TB) string {
	t.Helper()
	return testenv.Build{Pkg: "github.com/cdc-router/cdc-router/internal/e2e/accountsconsumer", Race: testenv.RouterRace()}.MustPath(t)
}

// outcomeTally counts the outcome lines of every instance of the projection, killed ones included.
type outcomeTally struct {
	mu       sync.Mutex
	kinds    map[string]int
	unparked int
	lines    int
}

func (o *outcomeTally) add(line string) {
	var kind, id string
	var unparked int
	if n, _ := fmt.Sscanf(line, "outcome %s %s %d", &kind, &id, &unparked); n != 3 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.kinds == nil {
		o.kinds = map[string]int{}
	}
	o.kinds[kind]++
	o.unparked += unparked
	o.lines++
}

func (o *outcomeTally) snapshot() (kinds map[string]int, unparked, lines int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	kinds = map[string]int{}
	for k, v := range o.kinds {
		kinds[k] = v
	}
	return kinds, o.unparked, o.lines
}

// outputBuffer collects a process's output for several goroutines.
type outputBuffer struct{ testenv.Buffer }

// Output is what was written so far.
func (b *outputBuffer) Output() string { return b.String() }

// projection is one running instance of the accountsconsumer program.
type projection struct {
	t    testing.TB
	name string
	cmd  *exec.Cmd
	logs *outputBuffer // the instance's stderr
	done chan struct{}
}

// startProjection runs an instance with the given environment and feeds its outcomes to tally.
func startProjection(t testing.TB, name string, env []string, tally *outcomeTally) *projection {
	t.Helper()
	p := &projection{t: t, name: name, logs: &outputBuffer{}, done: make(chan struct{})}
	p.cmd = exec.Command(consumerBinary(t))
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stderr = p.logs
	stdout, err := p.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			tally.add(s.Text())
		}
		p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.done
		out := p.logs.Output()
		if i := strings.Index(out, "WARNING: DATA RACE"); i >= 0 {
			t.Errorf("projection %s reported a data race:\n%s", name, tail(out[i:], 60))
		}
		if t.Failed() {
			t.Logf("projection %s output:\n%s", name, tail(out, 40))
		}
	})
	return p
}

// stop signals the instance and waits for it to exit; it returns the exit code (-1 after a signal).
func (p *projection) stop(sig syscall.Signal, timeout time.Duration) int {
	p.t.Helper()
	p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(timeout):
		p.t.Fatalf("projection %s did not exit within %v after %v:\n%s", p.name, timeout, sig, tail(p.logs.Output(), 40))
	}
	return p.cmd.ProcessState.ExitCode()
}
