package runner_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// pg is the throwaway PostgreSQL cluster of this test binary; each test gets its own database.
var pg *testenv.Postgres

func TestMain(m *testing.M) { testenv.Main(m, &pg) }

// summary prints a test's one-line figures to the test log and to stdout.
func summary(t *testing.T, format string, args ...any) {
	t.Helper()
	line := fmt.Sprintf(format, args...)
	t.Log(line)
	fmt.Printf("%s: %s\n", t.Name(), line)
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	return ctx
}
