package replication

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdc-router/cdc-router/copyboth"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/pgserver"
)

// frame handles one message of the CopyBoth stream.
func (s *session) frame(f copyboth.Frame) error {
	switch f.Type {
	case 'd':
		if f.Skipped {
			return s.skippedMessage(f)
		}
		return s.copyData(f.Data)
	case 'E':
		var m pgproto3.ErrorResponse
		if err := m.Decode(f.Data); err != nil {
			return fmt.Errorf("receive: parse ErrorResponse: %w", err)
		}
		return pgserver.ExplainStream(pgconn.ErrorResponseToPgError(&m), s.cfg.Slot)
	case 'N':
		var m pgproto3.NoticeResponse
		if err := m.Decode(f.Data); err != nil {
			return fmt.Errorf("receive: parse NoticeResponse: %w", err)
		}
		return s.notice(&m)
	case 'c':
		return caused(metrics.CausePostgres, errors.New("receive: PostgreSQL ended the replication stream (CopyDone), as it does when it shuts down"))
	case 'C':
		// A walsender that shuts down (a fast or smart stop) once all it sent was acknowledged sends
		// CommandComplete without a CopyDone before it, and exits (WalSndDone).
		return caused(metrics.CausePostgres, errors.New("receive: PostgreSQL ended the replication stream (CommandComplete), as its walsender does when PostgreSQL shuts down"))
	}
	return fmt.Errorf("unexpected message %q on the replication connection", f.Type)
}

// skippedMessage handles a logical decoding message whose content was discarded unread: one with another
// prefix is nothing to the router (as in the decoder); one with the router's prefix over the size bound is
// quarantined by the decoder from its header.
func (s *session) skippedMessage(f copyboth.Frame) error {
	s.net.received = max(s.net.received, cdc.LSN(f.XLog.WALStart))
	s.stats.SetWALEnd(cdc.LSN(f.XLog.ServerWALEnd))
	if f.Over == nil {
		return nil
	}
	return s.dec.Oversized(cdc.LSN(f.XLog.WALStart), f.Over.Transactional, f.Over.Size, s)
}
