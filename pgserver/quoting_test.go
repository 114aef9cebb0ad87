package pgserver

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestPublicationNamesOptionQuotesTheName pins the START_REPLICATION option: pgoutput reads its value as an
// identifier list, so an unquoted MyPub would be folded to mypub and a comma would split the name.
func TestPublicationNamesOptionQuotesTheName(t *testing.T) {
	for name, want := range map[string]string{
		"cdc_router_outbox": `publication_names '"cdc_router_outbox"'`,
		"MyPub":             `publication_names '"MyPub"'`,
		`a"b`:               `publication_names '"a""b"'`,
		"a,b":               `publication_names '"a,b"'`,
		"it's":              `publication_names '"it''s"'`,
	} {
		if got := publicationNamesOption(name); got != want {
			t.Errorf("publicationNamesOption(%q) = %s, want %s", name, got, want)
		}
	}
}

// TestExplainNoticeRefusesASkippedPublication: PostgreSQL 18's warning that it skipped the publication is a
// refusal naming reset (its events would be lost); any other notice is only logged.
func TestExplainNoticeRefusesASkippedPublication(t *testing.T) {
	skipped := &pgconn.PgError{Severity: "WARNING", Message: `skipped loading publication "p"`,
		Detail: `The publication "p" does not exist at this point in the WAL.`}
	err := ExplainNotice(skipped, "s1")
	if !isFatal(err) || !strings.Contains(err.Error(), "cdc-router reset --slot s1") ||
		!strings.Contains(err.Error(), `skipped loading publication "p"`) {
		t.Errorf("skipped publication: %v, want a refusal naming reset", err)
	}
	if err := ExplainNotice(&pgconn.PgError{Severity: "NOTICE", Message: "something else"}, "s1"); err != nil {
		t.Errorf("another notice: %v, want nil", err)
	}
}
