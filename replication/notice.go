package replication

import (
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdc-router/cdc-router/pgserver"
)

// notice handles a NoticeResponse the walsender sent inside the stream: one that means events would be lost
// (pgserver.ExplainNotice) ends the stream with its refusal; others are logged and the stream goes on.
func (s *session) notice(m *pgproto3.NoticeResponse) error {
	n := pgconn.ErrorResponseToPgError((*pgproto3.ErrorResponse)(m))
	if err := pgserver.ExplainNotice(n, s.cfg.Slot); err != nil {
		return err
	}
	s.log.Warn("PostgreSQL notice on the replication connection", "severity", n.Severity, "code", n.Code, "message", n.Message)
	return nil
}
