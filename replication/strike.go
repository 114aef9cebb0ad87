package replication

import (
	"context"
	"fmt"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
)

// refusalWrite bounds a write of the safety net's record (strike, forgive).
const refusalWrite = 10 * time.Second

// adoptRefusal starts the run's safety net from the slot's stored record (safetyNet.adopt), for a stream
// from start. Without a stored position the net goes on with what this process counted.
func adoptRefusal(ctx context.Context, store *offsets.Store, net *safetyNet, start cdc.LSN) error {
	r, ok, err := store.LoadRefusal(ctx)
	if err != nil || !ok {
		return err
	}
	net.adopt(r, start)
	return nil
}

// strike records err, the failure that ended the stream run, in the slot's stored record when it is a
// per-message refusal: a strike against the event that was alone in flight, if one was, and the position
// up to which the events now go one at a time. The write comes right after the refusal, before the run
// lets the slot go: the next run, of this process or of the other router of the slot, starts from it. A
// crash before the write loses that strike, never counts one twice. When the record cannot be written
// (no stored position, PostgreSQL failing) the strike counts in this process instead (safetyNet.failed).
func (s *session) strike(err error) {
	n := s.net
	if err == nil || !cdc.PerMessage(err) {
		return
	}
	ctx, end := s.onPostgres("record the broker's refusal in the slot's record", refusalWrite)
	defer end()
	r, ok, werr := s.store.Strike(ctx, max(n.until, n.received), n.alone, err.Error(), cdc.BrokerState(err))
	if werr != nil {
		s.log.Warn("the broker's refusal could not be recorded with the slot; it counts in this process only", "error", werr)
		return
	}
	if !ok {
		return
	}
	if !n.alone.Zero() {
		s.log.Info("RabbitMQ refused the event that was alone in flight", "event_id", n.alone.ID, "lsn", n.alone.LSN,
			"strikes", r.Strikes)
	}
	n.alone = offsets.RefusedEvent{}
	n.adopt(r, 0)
}

// forgive forgets the strikes of ev, which the broker confirmed or which was quarantined, also in the slot's
// stored record when it has them, so that a replay of ev starts counting anew.
func (s *session) forgive(ev cdc.Event) error {
	e := offsets.Refused(ev)
	if !s.net.cleared(e) {
		return nil
	}
	ctx, end := s.onPostgres("clear the broker's refusal from the slot's record", refusalWrite)
	defer end()
	if _, err := s.store.ClearRefusal(ctx, e); err != nil {
		return caused(metrics.CausePostgres, fmt.Errorf("event %s: %w", ev.ID, err))
	}
	return nil
}
