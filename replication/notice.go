package replication

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/cdc-router/cdc-router/pgserver"
)

// notice handles a NoticeResponse the walsender sent inside the stream. PostgreSQL 18's pgoutput no longer
// fails when a publication named in publication_names does not exist where it decodes: it warns "skipped
// loading publication" and streams on without it, so every outbox row from there on would be lost without
// an error. That warning is a refusal here, naming the fix. Creating the publication again is not enough:
// the WAL written while it was missing decodes without it on every restart, so the fix is a re-snapshot,
// which republishes the rows still in the outbox table. Other notices are logged and the stream goes on.
func (s *session) notice(m *pgproto3.NoticeResponse) error {
	n := pgconn.ErrorResponseToPgError((*pgproto3.ErrorResponse)(m))
	if !strings.HasPrefix(n.Message, "skipped loading publication") {
		s.log.Warn("PostgreSQL notice on the replication connection", "severity", n.Severity, "code", n.Code, "message", n.Message)
		return nil
	}
	return pgserver.PublicationDropped(s.cfg.Slot, fmt.Sprintf("PostgreSQL %s (%s) and streams on without it, so the outbox's rows "+
		"from there on would never be sent", n.Message, strings.TrimSuffix(n.Detail, ".")))
}
