package check

import (
	"fmt"
	"strings"
	"time"
)

// unauthenticated is the reason the router gives a message with its prefix that no loaded key signed
// (docs/howto/rotate-emit-keys.md#what-the-router-needs).
const unauthenticated = "unauthenticated emitted message"

// checkForged holds the roles without the right to write events to it (docs/howto/secure.md#postgresql-roles): their calls of emit are refused, and their messages with the prefix are never published but
// quarantined: once one committed while a router streamed, with time to spare before
// the end, the quarantine holds a record with that reason (records are aggregated per reason and second,
// so they are counted, not matched by id).
func checkForged(h *History, _ Limits) []Violation {
	var vs []Violation
	first := firstDeliveries(h)
	for _, r := range h.Rows {
		if i, ok := first[r.ID]; ok && r.Forged {
			vs = append(vs, Violation{Detail: fmt.Sprintf("unauthenticated emitted message %s (%s v%d) was published",
				r.ID, r.Aggregate, r.Version), Aggregate: r.Aggregate, At: h.Deliv[i].At})
		}
	}
	for _, e := range h.Events {
		if e.Kind == KindIntruderEmit && !strings.HasPrefix(e.Note, "refused") && !connectionLost(e.Note) {
			vs = append(vs, Violation{Detail: fmt.Sprintf("a role without EXECUTE on emit called it at +%.2fs: %s",
				e.From.Sub(h.Start).Seconds(), e.Note), At: e.From})
		}
	}
	var due *Row
	for i, r := range h.Rows {
		if r.Forged && !r.Unknown && r.Committed.Before(h.End.Add(-10*time.Second)) && !slotless(h, r.Committed) {
			due = &h.Rows[i]
			break
		}
	}
	if due == nil {
		return vs
	}
	for _, q := range h.Quar {
		if strings.Contains(q.Reason, unauthenticated) {
			return vs
		}
	}
	return append(vs, Violation{Detail: fmt.Sprintf("message %s, unsigned or forged, committed at +%.2fs, yet no quarantine record says %q",
		due.ID, due.Committed.Sub(h.Start).Seconds(), unauthenticated), At: due.Committed})
}

// connectionLost reports whether a call's outcome is the loss of its connection (PostgreSQL restarting or
// shutting down, the socket closed), which tells nothing of the role's rights: the call got no verdict, and a
// message it may have written is held to never being published like any forged one (seeds 583 and 34).
func connectionLost(note string) bool {
	for _, m := range []string{"SQLSTATE 57P01", "SQLSTATE 57P02", "SQLSTATE 57P03", "SQLSTATE 08006", "conn closed", "unexpected EOF", "connection reset by peer"} {
		if strings.HasPrefix(note, "failed otherwise") && strings.Contains(note, m) {
			return true
		}
	}
	return false
}
