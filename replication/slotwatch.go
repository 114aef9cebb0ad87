package replication

import (
	"time"

	"github.com/cdc-router/cdc-router/pgserver"
)

// slotWatch reads the slot's health for the metrics and the readiness check while the stream runs
// (pgserver.SlotWatch: every pgserver.SlotHealthInterval, a failed read logged and retried).
type slotWatch struct{ pgserver.SlotWatch }

// due reads the health when the interval has passed; a read that left the ordinary connection closed ends
// the stream, since the stored position and the quarantine need that connection too.
func (w *slotWatch) due(s *session) error {
	if s.ctx.Err() != nil || !w.Due() { // no reads once the stop is requested: it is bounded
		return nil
	}
	ctx, cancel := s.onPostgres("read the slot's health", s.bounded(5*time.Second))
	defer cancel()
	h, ok, err := w.Read(ctx, s.sql, s.cfg.Slot, s.stats.Slot(), s.log)
	if ok {
		s.stats.SetSlot(h)
	}
	return err
}
