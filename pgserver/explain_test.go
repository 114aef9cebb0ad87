package pgserver

import (
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestExplainConnectEndsWithTheSQLSTATE: a refusal with no fix of its own is one sentence ending in its
// SQLSTATE, which is how replication's causeOf labels the restart it causes as cause=postgres.
func TestExplainConnectEndsWithTheSQLSTATE(t *testing.T) {
	for _, code := range []string{"57P03", "53300"} {
		err := explainConnect(&pgconn.PgError{Code: code, Message: "refused"}, "a:5432")
		if !strings.HasSuffix(err.Error(), "(SQLSTATE "+code+")") {
			t.Errorf("%s: %q does not end in its SQLSTATE", code, err)
		}
	}
}
