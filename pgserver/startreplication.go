package pgserver

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

// ErrSlotBusy marks a slot held by another router (its advisory lock) or walsender (55006 at
// START_REPLICATION): the router stands by, retrying for as long as it takes, also at start, since a second
// router waits for the first and a restarted one waits for its predecessor's walsender.
var ErrSlotBusy = errors.New("slot busy")

// publicationNamesOption is pgoutput's publication_names option for START_REPLICATION. Its value is an
// identifier list that pgoutput splits at commas and folds to lower case unless quoted, so the name is
// written as a quoted identifier (embedded double quotes doubled) inside a string literal (single quotes
// doubled): MyPub stays MyPub and a comma in a name does not split it.
func publicationNamesOption(publication string) string {
	ident := pgx.Identifier{publication}.Sanitize()
	return "publication_names '" + strings.ReplaceAll(ident, "'", "''") + "'"
}

// PluginArgs are pgoutput's options for START_REPLICATION: proto_version 1 and the publication, and, with
// messages (--message-prefix is set), messages 'true' so that logical decoding messages arrive (PostgreSQL
// 14+; proto_version 1 carries them in the transaction's order, transactional ones between Begin and Commit).
func PluginArgs(publication string, messages bool) []string {
	args := []string{"proto_version '1'", publicationNamesOption(publication)}
	if messages {
		args = append(args, "messages 'true'")
	}
	return args
}

// BusyError says that the slot is streamed by another process while this router holds the advisory lock;
// it wraps ErrSlotBusy.
func BusyError(slot string) error {
	return fmt.Errorf("slot %s is in use by another process (the walsender of a router that just died, which "+
		"PostgreSQL ends when it finds the connection closed, or within wal_sender_timeout; or a consumer that "+
		"is not a router): %w", slot, ErrSlotBusy)
}

// ExplainStart classifies a failed START_REPLICATION of slot, started with messages 'true' when messages is
// set: a slot in use wraps ErrSlotBusy, what the operator must fix is a *cdc.Fatal naming the fix.
func ExplainStart(err error, slot string, messages bool) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		switch pgErr.Code {
		case "55006":
			return fmt.Errorf("%w: %w", BusyError(slot), err)
		case "22023":
			if messages && strings.Contains(pgErr.Message, "messages") {
				return cdc.Fatalf("PostgreSQL refused pgoutput's messages option (%s): --message-prefix needs PostgreSQL 14 or later; "+
					"upgrade, or run without --message-prefix", pgErr.Message)
			}
			return ExplainStream(pgErr, slot)
		default:
			return ExplainStream(pgErr, slot)
		}
	}
	return fmt.Errorf("start replication: %w", err)
}

// ExplainStream classifies an error the server sent inside the stream of slot.
func ExplainStream(err *pgconn.PgError, slot string) error {
	switch err.Code {
	case "55000":
		return cdc.Fatalf("PostgreSQL can no longer stream from slot %s (%s): run `cdc-router reset --slot %s` and "+
			"`cdc-router run` to re-snapshot", slot, err.Message, slot)
	case "42704":
		if strings.HasPrefix(err.Message, "publication") {
			return PublicationDropped(slot, "PostgreSQL says "+err.Message)
		}
		return cdc.Fatalf("PostgreSQL says %s: run `cdc-router migrate` or fix --publication / --slot", err.Message)
	}
	return fmt.Errorf("replication stream: %w", err)
}

// ExplainNotice is the refusal a notice of the walsender streaming slot stands for, nil for a notice that
// is only to be logged. PostgreSQL 18's pgoutput no longer fails when a publication named in
// publication_names does not exist where it decodes: it warns "skipped loading publication" and streams on
// without it, so every outbox row from there on would be lost without an error. That warning is a refusal,
// naming the fix. Creating the publication again is not enough: the WAL written while it was missing
// decodes without it on every restart, so the fix is a re-snapshot, which republishes the rows still in
// the outbox table.
func ExplainNotice(n *pgconn.PgError, slot string) error {
	if !strings.HasPrefix(n.Message, "skipped loading publication") {
		return nil
	}
	return PublicationDropped(slot, fmt.Sprintf("PostgreSQL %s (%s) and streams on without it, so the outbox's rows "+
		"from there on would never be sent", n.Message, strings.TrimSuffix(n.Detail, ".")))
}

// PublicationDropped is the refusal for a publication dropped while the router streamed from slot, what
// being how PostgreSQL said so: PostgreSQL 18 skips it with a warning, earlier versions fail the stream with
// 42704. Either way the WAL written while it was missing decodes without it on every restart, so recreating
// it is not enough: the fix is a re-snapshot.
func PublicationDropped(slot, what string) error {
	return cdc.Fatalf("%s: the publication was dropped while the router streamed, and the router refuses; create it "+
		"again with `cdc-router migrate`, then run `cdc-router reset --slot %s` (before PostgreSQL 18 it cannot count "+
		"what the slot holds without the publication, and asks for --force) and `cdc-router run` (which "+
		"re-snapshots the outbox table, republishing the rows inserted meanwhile)", what, slot)
}

// PermanentSetupError turns an error that no retry can fix (a missing privilege, a router table or schema
// that does not exist) into a *cdc.Fatal naming the fix, so that it is refused at once instead of retried
// through the start-up grace; nil for any other error.
func PermanentSetupError(err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch pgErr.Code {
	case "42501":
		return cdc.Fatalf("PostgreSQL refused the router's role: %s; grant what it needs (docs/howto/set-up-the-database.md#database-role-and-access lists "+
			"the grants of a least-privilege role) and start again", pgErr.Message)
	case "42P01", "3F000":
		return cdc.Fatalf("PostgreSQL says %s: run `cdc-router migrate` (as the owner of the outbox table) and start again",
			pgErr.Message)
	}
	return nil
}
