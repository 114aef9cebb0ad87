package admin

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// StatusPeekTimeout bounds CountPending's peek: status answers within seconds whatever the slot holds.
const StatusPeekTimeout = 5 * time.Second

// CountPending counts what waits in the slot past the acknowledged position (the later of
// confirmed_flush_lsn and a stored position within this server's WAL, as reset counts it), with
// opts.Publication and opts.MessagePrefix as the router reads the slot, and records it in r.Pending. It
// counts only a valid slot that no process streams and no router of which runs (a peek needs the slot, and
// would hold it for a moment from a router that starts). Otherwise, and when the peek fails, r.Pending
// stays nil; r.PendingNote says why a peek that was tried failed.
func CountPending(ctx context.Context, conn *pgx.Conn, r *Report, opts ResetOptions) {
	if !r.SlotExists || r.Active || r.Locked || r.ConfirmedFlush == 0 || r.Invalidation != "" || r.WALStatus == "lost" {
		return
	}
	from := r.ConfirmedFlush
	if r.Stored != nil && r.Stored.LSN > from && r.Stored.LSN <= r.ConfirmedFlush+cdc.LSN(max(r.LagBytes, 0)) {
		from = r.Stored.LSN // stored after the last status update reached PostgreSQL
	}
	if opts.PeekTimeout <= 0 {
		opts.PeekTimeout = StatusPeekTimeout
	}
	u, err := peekUnpublished(ctx, conn, r.Slot, from, opts)
	if err != nil {
		r.PendingNote = err.Error()
		return
	}
	r.Pending = &u
}

// pendingLine explains the byte lag of a slot no router streams: caught up (the bytes are WAL without
// events), or the events that wait, or why they could not be counted.
func (r Report) pendingLine() string {
	const indent = "                  "
	switch {
	case r.Pending != nil && r.Pending.Events() == 0 && !r.Pending.AtLeast && len(r.InFlight) > 0:
		return indent + fmt.Sprintf("not caught up: no events wait in the slot yet, but %d transactions in flight may "+
			"still write some (below)\n", len(r.InFlight))
	case r.Pending != nil && r.Pending.Events() == 0 && !r.Pending.AtLeast && r.InFlightNote != "":
		return indent + "no events wait in the slot yet; whether transactions in flight may still write some is not " +
			"known (below)\n"
	case r.Pending != nil && r.Pending.Events() == 0 && !r.Pending.AtLeast:
		if r.LagBytes <= 0 {
			return indent + "caught up: no events wait in the slot\n"
		}
		return indent + fmt.Sprintf("caught up: no events wait in the slot; the %s are WAL written after the last "+
			"event (other tables' changes, the router's own writes of its position), not events\n", HumanBytes(r.LagBytes))
	case r.Pending != nil:
		return indent + "not caught up: " + r.Pending.String() + " wait in the slot for the next run\n"
	case r.PendingNote != "":
		return indent + "events waiting in the slot not counted: " + r.PendingNote + "\n"
	case r.Active && r.LagBytes > 0:
		return indent + "the router acknowledges as the broker confirms; an idle router's lag is WAL without events " +
			"(acknowledged at the next keepalive)\n"
	}
	return ""
}

// inFlightLine names the transactions in flight that may still write into the slot, at most
// inFlightListed of them (status --json lists all).
func (r Report) inFlightLine() string {
	switch {
	case r.InFlightNote != "":
		return "in flight:        not known: " + r.InFlightNote + "\n"
	case len(r.InFlight) == 0:
		return ""
	}
	return fmt.Sprintf("in flight:        %d transactions of this database are open or prepared and may still write "+
		"events into the slot (reset waits for them to end): %s\n", len(r.InFlight), listInFlight(r.InFlight, inFlightListed))
}

// inFlightListed is how many transactions in flight the text status names.
const inFlightListed = 10

// storedVersusConfirmed explains a stored position that differs from the slot's confirmed_flush_lsn.
func (r Report) storedVersusConfirmed() string {
	const indent = "                  "
	if r.Stored == nil || !r.SlotExists || r.ConfirmedFlush == 0 || r.Stored.LSN == r.ConfirmedFlush {
		return ""
	}
	if r.Stored.LSN < r.ConfirmedFlush {
		return indent + fmt.Sprintf("%s behind confirmed flush: the slot also advances over WAL without events "+
			"(keepalives; on an idle database mostly the router's own last write), which the router stores at most "+
			"once a minute; harmless: a start resumes from the later of the two\n",
			HumanBytes(int64(r.ConfirmedFlush-r.Stored.LSN)))
	}
	return indent + fmt.Sprintf("%s ahead of confirmed flush: stored after the last status update reached "+
		"PostgreSQL, or the slot fell back to its last checkpoint in a crash; harmless: a start resumes from the "+
		"later of the two\n", HumanBytes(int64(r.Stored.LSN-r.ConfirmedFlush)))
}
