package admin

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// CountPendingOfStopped counts, for each slot of the fleet that exists and that no process streams, what
// waits in it past the acknowledged position (CountPending, with the publication and message prefix its
// router recorded), into FleetSlot.Pending; a slot without a record is not counted (its router's publication
// is not known), and neither is one whose router runs (its peek would hold the slot from it). A failed
// count leaves Pending nil with PendingNote saying why; it never fails the fleet.
// It also reads the database's transactions in flight (InFlightTransactions): while one exists, no slot is
// shown caught up.
func (f *FleetReport) CountPendingOfStopped(ctx context.Context, conn *pgx.Conn) error {
	var err error
	if f.InFlight, err = InFlightTransactions(ctx, conn); err != nil {
		f.InFlightNote = err.Error()
	}
	for i := range f.Slots {
		sl := &f.Slots[i]
		switch {
		case !sl.Exists || sl.Active:
			continue
		case sl.Speaker == nil:
			sl.PendingNote = "not counted: no router recorded the publication it reads"
			continue
		case sl.Speaker.Live(f.Now):
			continue
		}
		r, err := Status(ctx, conn, sl.Slot, f.Schema)
		if err != nil {
			return err
		}
		CountPending(ctx, conn, &r, ResetOptions{Publication: sl.Speaker.Publication, MessagePrefix: sl.Speaker.MessagePrefix})
		sl.Pending, sl.PendingNote = r.Pending, r.PendingNote
	}
	return nil
}

// pendingText is the slot's pending line of the text fleet view, "" when it was not counted.
func (sl FleetSlot) pendingText(f FleetReport) string {
	switch {
	case sl.Pending != nil && sl.Pending.Events() == 0 && !sl.Pending.AtLeast && len(f.InFlight) > 0:
		return fmt.Sprintf("pending:          not caught up: no events wait in the slot yet, but %d transactions in "+
			"flight may still write some (below)\n", len(f.InFlight))
	case sl.Pending != nil && sl.Pending.Events() == 0 && !sl.Pending.AtLeast && f.InFlightNote != "":
		return "pending:          no events wait in the slot yet; whether transactions in flight may still write some " +
			"is not known (below)\n"
	case sl.Pending != nil && sl.Pending.Events() == 0 && !sl.Pending.AtLeast:
		return "pending:          caught up: no events wait in the slot\n"
	case sl.Pending != nil:
		return "pending:          not caught up: " + sl.Pending.String() + " wait in the slot for the next run\n"
	case sl.PendingNote != "":
		return "pending:          " + sl.PendingNote + "\n"
	}
	return ""
}
