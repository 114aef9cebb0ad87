package main

import (
	"os"
	"testing"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// The tests here are the command line's own: flags, usage errors, output. What the system promises is
// tested end to end in e2e/ (one file per guarantee) and by the invariant harness in chaos/.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.RemoveBuilds()
	os.Exit(code)
}
