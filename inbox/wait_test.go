package inbox_test

import (
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/inbox"
)

// A schema that is missing stays a refusal at New when PostgreSQL answers: waiting cannot cure it.
func TestNewRefusesAMissingSchemaWithPostgresUp(t *testing.T) {
	l := newBareLab(t)
	_, err := inbox.New(l.DB, l.Handle, inbox.Config{Consumer: "c"}, nil)
	if err == nil || !strings.Contains(err.Error(), "run inbox.MigrateSchema") {
		t.Errorf("New on a database without the inbox tables: %v", err)
	}
}
