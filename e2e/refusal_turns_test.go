package e2e

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestRefusedEventIsQuarantinedWhileTheSlotsRoutersTakeTurns (issue 36, seed 9711): a router and its
// standby on one slot, and an event over the broker's max_message_size, which RabbitMQ refuses with 406 at
// each publish. Each refusal ends the active router's run, and the test makes the other router take over
// then: by pausing the refused one until the other streams ("taking turns", as the chaos harness's routers
// did by their backoffs), or by killing it and starting a new standby ("each refused router restarted").
// The safety net's strikes live with the slot (the stored record, migration 018), so the event is
// quarantined after its pipelined refusal and three refusals alone in flight, whichever process saw them,
// with the broker's words, and the rows behind it, of its aggregate and of others, are delivered in order.
// Counted per process, as before, it took nine refusals taking turns, and restarted routers never
// quarantined it (each process's one try was pipelined, so never a strike).
func TestRefusedEventIsQuarantinedWhileTheSlotsRoutersTakeTurns(t *testing.T) {
	node := testenv.StartRabbitMQNode(t, fmt.Sprintf("max_message_size = %d", 64<<10))
	for _, tc := range []struct {
		name    string
		restart bool
	}{{"taking turns", false}, {"each refused router restarted", true}} {
		t.Run(tc.name, func(t *testing.T) { refusedWhileTakingTurns(t, node, tc.restart) })
	}
}

// refusedWhileTakingTurns is one case of TestRefusedEventIsQuarantinedWhileTheSlotsRoutersTakeTurns.
func refusedWhileTakingTurns(t *testing.T, node *testenv.RabbitMQNode, restart bool) {
	const maxTurns = 8
	e := newStreamEnvOn(t, node)
	c := e.consume(e.queue)
	flags := []string{"--lease", "4s"} // a router paused while it holds the slot lets it go within 4 s
	active := e.start("", flags...)
	active.waitLog("msg=streaming ", 30*time.Second)
	standby := e.start("", flags...)
	standby.waitLog("another router holds slot", 30*time.Second)
	w := newWriter(t, e.pgURL, 5)
	w.write(20, 5, 0)
	ctx := context.Background()
	var big string
	if err := e.db.QueryRow(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type,
		payload) VALUES (gen_random_uuid(), 'order', 'big', 1, 'created', jsonb_build_object('x', repeat('x', 100000)))
		RETURNING id::text`).Scan(&big); err != nil {
		t.Fatal(err)
	}
	behind := []row{{uuid(), "order", "big", 2}, {uuid(), "order", "big", 3}}
	for _, r := range behind {
		e.exec(`INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
			VALUES ($1, 'order', 'big', $2, 'created', '{}')`, r.id, r.version)
	}
	w.write(20, 5, 0)
	quarantined := func() (string, bool) {
		var reason string
		err := e.db.QueryRow(ctx, `SELECT reason FROM cdc_router.quarantine WHERE event_id = $1`, big).Scan(&reason)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			t.Fatal(err)
		}
		return reason, err == nil
	}
	refusals := func(r *router) int { // the runs the broker's 406 ended
		n := 0
		for _, line := range strings.Split(r.Output(), "\n") {
			if strings.Contains(line, "restarting from the acknowledged position") && strings.Contains(line, "PRECONDITION_FAILED") {
				n++
			}
		}
		return n
	}
	// Each refusal ends a run: the router that logged it is paused (or killed) until another one streams.
	// A router may take the slot back before the test sees its line (its first backoffs are short), so the
	// refusals are counted in every router's output, and any router's new refusal is a turn.
	all, live := []*router{active, standby}, []*router{active, standby}
	seen := map[*router]int{}
	total := func() int {
		n := 0
		for _, r := range all {
			n += refusals(r)
		}
		return n
	}
	reason, ok := "", false
	for total() <= maxTurns {
		var refused *router
		deadline := time.Now().Add(60 * time.Second)
		for refused == nil {
			if reason, ok = quarantined(); ok {
				break
			}
			for _, r := range live {
				if n := refusals(r); n > seen[r] {
					refused, seen[r] = r, n
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %d refusals, neither another nor the quarantine within 60 s:\n%s", total(), tail(live[0].Output(), 30))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ok {
			break
		}
		streams := map[*router]int{}
		for _, r := range live {
			streams[r] = strings.Count(r.Output(), "msg=streaming ")
		}
		if restart {
			refused.signal(syscall.SIGKILL)
		} else {
			refused.signal(syscall.SIGSTOP)
		}
		deadline = time.Now().Add(30 * time.Second)
		for took := false; !took; {
			for _, r := range live {
				took = took || r != refused && strings.Count(r.Output(), "msg=streaming ") > streams[r]
			}
			if time.Now().After(deadline) {
				refused.signal(syscall.SIGCONT)
				t.Fatalf("after %d refusals, no other router took over within 30 s:\n%s", total(), tail(refused.Output(), 30))
			}
			time.Sleep(10 * time.Millisecond)
		}
		if !restart {
			refused.signal(syscall.SIGCONT)
			continue
		}
		next := e.start("", flags...)
		all = append(all, next)
		for i, r := range live {
			if r == refused {
				live[i] = next
			}
		}
	}
	turns := total()
	if !ok {
		t.Fatalf("the refused event was never quarantined in %d refusals, each ending in a takeover", turns)
	}
	t.Logf("quarantined after %d refusals over %d router processes, each refusal ending in a takeover: %s", turns, len(all), reason)
	if !strings.Contains(reason, "406") || !strings.Contains(reason, "3 times") {
		t.Errorf("quarantine reason %q, want the broker's 406 and the count", reason)
	}
	if turns > 4 {
		t.Errorf("%d refusals before the quarantine, want 4: a pipelined one and three alone in flight", turns)
	}
	got := c.waitFor(t, append(append([]row{}, w.rows...), behind...), 90*time.Second)
	checkOrder(t, got)
	for _, d := range got {
		if d.id == big {
			t.Errorf("the refused event was delivered")
		}
	}
	var stored *string
	if err := e.db.QueryRow(ctx, `SELECT refusal_event_id FROM cdc_router.positions WHERE slot = $1`, e.slot).Scan(&stored); err != nil {
		t.Fatal(err)
	}
	if stored != nil {
		t.Errorf("the slot's record still has strikes for event %s after its quarantine", *stored)
	}
}
