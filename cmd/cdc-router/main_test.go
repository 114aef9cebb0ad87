package main

import (
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// pg is the suite's PostgreSQL cluster, for the commands that need a database (inbox).
var pg *testenv.Postgres

// The tests here are the command line's own: flags, usage errors, output. What the system promises is
// tested end to end in e2e/ (one file per guarantee) and by the invariant harness in chaos/.
func TestMain(m *testing.M) { testenv.Main(m, &pg) }
