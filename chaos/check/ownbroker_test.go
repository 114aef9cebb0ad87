package check

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// nackReason is the reason route gives a nack that --refusal-retry could not outlast.
const nackReason = `nacked by the broker (a queue bound to exchange "x" refused it: x-max-length or x-max-length-bytes ` +
	`with x-overflow=reject-publish, a full queue or a message larger than the queue allows, or an internal error) (retried 3 times over 2s)`

// TestPolicyRefusalExcusedOnlyInItsWindow: a valid row quarantined because a queue-length policy made the
// consumer's queue refuse it holds only with a nack's reason after --refusal-retry, when a router logged a
// nack of that event while the policy was set (or within policySlack after its clear), and the record came
// after the set (it may come much later: another fault may keep the stream from the event). A nack logged
// outside the window, of another event, another reason, or no policy at all: a valid row quarantined.
// Left unquarantined and undelivered, it is missing.
func TestPolicyRefusalExcusedOnlyInItsWindow(t *testing.T) {
	h := clean()
	h.Setup.OwnBroker = true
	h.Deliv = append(h.Deliv[:1], h.Deliv[2])
	h.Quar = []Quarantined{{EventID: "b", Reason: nackReason, At: at(9)}}
	h.Events = []Event{{From: at(0.9), To: at(2.5), Kind: gen.FaultQueuePolicy}}
	h.Logs = []LogLine{{At: at(1.4), Router: 0, Level: "WARN", Text: `level=WARN msg="stream stopped; restarting from the acknowledged position" ` +
		`error="publish: publish event b: nacked by the broker (a queue bound to exchange \"x\" refused it: …)"`}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a row quarantined after the policy refused it: %v", vs)
	}
	for i := range h.Rows {
		h.Rows[i].Aggregate = "order/w0-1" // Coverage reads the writer from it
	}
	if c := Coverage(h); c["seen:policy-nacked-quarantined"] != 1 {
		t.Errorf("coverage: %v", c)
	}
	h.Logs[0].At = at(2.5).Add(policySlack + time.Second) // nacked after the policy was cleared
	broken(t, h, "published-or-quarantined", "valid row b")
	h.Logs[0].At = at(0.5) // before the policy was set
	broken(t, h, "published-or-quarantined", "valid row b")
	h.Logs[0].At = at(1.4)
	h.Quar[0].At = at(0.8) // quarantined before the policy was set
	broken(t, h, "published-or-quarantined", "valid row b")
	h.Quar[0].At = at(9)
	h.Logs[0].Text = strings.ReplaceAll(h.Logs[0].Text, "event b", "event c") // another event's nack
	broken(t, h, "published-or-quarantined", "valid row b")
	h.Logs[0].Text = strings.ReplaceAll(h.Logs[0].Text, "event c", "event b")
	h.Quar[0].Reason = `nacked by the broker (a queue bound to exchange "x" refused it: x-max-length or x-max-length-bytes with x-overflow=reject-publish, ...)`
	broken(t, h, "published-or-quarantined", "valid row b") // not retried for --refusal-retry
	h.Quar[0].Reason = `returned by the broker (312 NO_ROUTE): nothing is bound to routing key "k" on exchange "x" (retried 3 times over 2s)`
	broken(t, h, "published-or-quarantined", "valid row b")
	h.Quar[0].Reason = nackReason
	h.Events[0].Kind = gen.FaultMemAlarm
	broken(t, h, "published-or-quarantined", "valid row b")
	h.Events[0].Kind = gen.FaultQueuePolicy
	h.Quar = nil
	broken(t, h, "published-or-quarantined", "row b")
}

// TestAccessRefusalNamesTheFix: while the routers' user lacks a right (RabbitMQ's write, PostgreSQL's
// REPLICATION), each line naming the refusal names the command that grants it, one of them is an ERROR,
// and the router that logged it answers /readyz 503 until the restore; its exits then are no restart loop,
// and a stall the refusal causes is excused within its window and the bound after it, not past it.
func TestAccessRefusalNamesTheFix(t *testing.T) {
	refused := `level=ERROR msg="stream stopped" err="user \"router_x\" may not publish to exchange \"x\" (403 ACCESS_REFUSED): ` +
		`grant it write permission (rabbitmqctl set_permissions -p / router_x \".*\" \".*\" \".*\")"`
	h := clean()
	h.Setup.OwnBroker = true
	h.Events = []Event{{From: at(0.5), To: at(2), Kind: gen.FaultPermissions}}
	h.Deliv[1].At, h.Deliv[2].At = at(2.5), at(2.6)
	h.Logs = []LogLine{{At: at(0.7), Router: 0, Level: "ERROR", Text: refused}}
	h.Ready = []Sample{{At: at(0.6), Code: 200}, {At: at(1), Code: 503}, {At: at(1.9), Code: 503}, {At: at(2.3), Code: 200}}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a refusal named and /readyz 503: %v", vs)
	}
	h.Ready[2].Code = 200
	broken(t, h, "access-refusal-names-the-fix", "router 0 answered /readyz 200 at +1.90s")
	// Seed 8032: the supervisor started the refused process again at +1.85: it streams and says 200 until its
	// first publish meets the refusal; that sample is the new process's.
	h.Logs = append(h.Logs, LogLine{At: at(1.85), Router: 0, Level: "INFO", Text: `level=INFO msg=starting version=dev`})
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("a process started again after the refusal, before it met it: %v", vs)
	}
	h.Logs = append(h.Logs, LogLine{At: at(0.8), Router: 0, Level: "ERROR", Text: refused})
	h.Logs[1].At = at(0.75) // started again before its own refusal at +0.8: judged
	broken(t, h, "access-refusal-names-the-fix", "router 0 answered /readyz 200 at +1.90s")
	h.Logs = h.Logs[:1]
	// Seed 5023: the standby beside the refused process answers 200, as a standby does; the process that
	// logged the refusal is judged, not its router's other one.
	h.Ready[2].Proc = 1
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("the standby's 200 beside a refused active process: %v", vs)
	}
	h.Ready[2].Proc, h.Logs[0].Proc = 1, 1
	broken(t, h, "access-refusal-names-the-fix", "router 0 answered /readyz 200 at +1.90s")
	// Seed 7013: the refused process, started again, finds the slot held and stands by: 200, with
	// /readyz?active=1 503. Judged only while it says it is active.
	h.Setup.Standby = true
	h.Ready[2].Active = 503
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("the refused process standing by after its restart: %v", vs)
	}
	h.Ready[2].Active = 200
	broken(t, h, "access-refusal-names-the-fix", "router 0 answered /readyz 200 at +1.90s")
	h.Setup.Standby = false
	h.Ready[2].Active = 0
	h.Ready[2].Proc, h.Logs[0].Proc = 0, 0
	h.Ready[2].Code = 503
	h.Logs[0].Level = "WARN"
	broken(t, h, "access-refusal-names-the-fix", "router 0 named the refusal (permissions-revoked) from +0.70s but never at ERROR")
	h.Logs[0].Level = "ERROR"
	h.Logs = append(h.Logs, LogLine{At: at(0.65), Router: 0, Level: "WARN",
		Text: `level=WARN msg="router failed" reason="403 ACCESS_REFUSED - access to exchange 'x' in vhost '/' refused for user 'router_x'"`})
	broken(t, h, "access-refusal-names-the-fix", "without the fix, as WARN")
	h.Logs = h.Logs[:1]

	// The router exits on the refusal (the docs' refusals that need a human), and its supervisor restarts it
	// into the same refusal: exits in the window and the bound after it are no restart loop; past it they are.
	exit := `exit 1: level=ERROR msg="exiting: the router does not retry this" error="user \"router_x\" may not declare exchange \"x\" on vhost \"/\" (403 ACCESS_REFUSED): grant it…`
	for _, s := range []float64{0.8, 1.4, 2.2, 6.9} {
		h.Events = append(h.Events, Event{From: at(s), To: at(s), Kind: KindRouterExit, Note: exit})
	}
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("exits on the refusal: %v", vs)
	}
	for _, s := range []float64{7.1, 7.5, 8, 8.5} {
		h.Events = append(h.Events, Event{From: at(s), To: at(s), Kind: KindRouterExit, Note: exit})
	}
	broken(t, h, "no-restart-loop", "router 0 exited on its own 4 times")
	h.Events = h.Events[:1]
	// PostgreSQL's refusals alike: an exit naming the role's missing REPLICATION is held behind it only while
	// that right is revoked (and the bound after).
	pgExit := `exit 1: level=ERROR msg="exiting: the router does not retry this" error="role \"r\" has no REPLICATION right: run ALTER ROLE \"r\" WITH REPLICATION as a superuser…`
	for _, s := range []float64{0.8, 1.4, 2.2, 6.9} {
		h.Events = append(h.Events, Event{From: at(s), To: at(s), Kind: KindRouterExit, Note: pgExit})
	}
	broken(t, h, "no-restart-loop", "router 0 exited on its own 4 times") // the RabbitMQ revocation excuses no PostgreSQL refusal
	h.Events[0].Kind = gen.FaultPGRights
	if vs := Check(h, limits); len(vs) != 0 {
		t.Fatalf("exits on PostgreSQL's refusal: %v", vs)
	}
	h.Events = h.Events[:1]
	h.Events[0].Kind = gen.FaultPermissions

	// A stall of 6 s (past the 5 s bound) with /readyz 503 and the refusal logged: excused while it ends
	// within the bound after the restore, not when it goes on past it.
	h.Ready = nil
	for s := 0.2; s < 8; s += 0.5 {
		h.Ready = append(h.Ready, Sample{At: at(s), Code: 503})
	}
	h.Deliv[1].At, h.Deliv[2].At = at(6.9), at(7)
	h.Logs[0].At = at(1.2) // inside the stall (row b pending from +1 s)
	for _, v := range Check(h, limits) {
		if v.Invariant == "no-silent-stall" {
			t.Fatalf("a stall within the refusal's window and bound: %v", v)
		}
	}
	h.Events[0].To = at(1) // restored at +1 s: the stall outlasts its bound by a second
	for s := 8.2; s < 9; s += 0.5 {
		h.Ready = append(h.Ready, Sample{At: at(s), Code: 503})
	}
	h.Deliv[1].At, h.Deliv[2].At = at(8.5), at(8.6)
	broken(t, h, "no-silent-stall", "no progress for")
	h.Logs = append(h.Logs, LogLine{At: at(3), Router: 0, Level: "WARN", Text: `level=WARN msg="stream stopped; restarting" err="connection refused"`})
	for _, v := range Check(h, limits) {
		if v.Invariant == "no-silent-stall" {
			t.Fatalf("a stall with another cause named: %v", v)
		}
	}
}
