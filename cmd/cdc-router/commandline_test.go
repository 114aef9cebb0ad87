package main

import (
	"context"
	"io"
	"strings"
	"testing"
)

// TestOperatorCommandLines: IDs and flags in any order; bad IDs and missing arguments are usage errors
// (exit 2) before anything connects.
func TestOperatorCommandLines(t *testing.T) {
	s := newSettings("quarantine replay", func(string) string { return "" }, io.Discard)
	s.String("pg-url", "", "")
	s.Bool("force", false, "")
	flags, ids := splitArgs(s.fs, []string{"7", "--pg-url", "postgres://x", "--force", "8", "--pg-url=y", "--", "-9"})
	if strings.Join(flags, " ") != "--pg-url postgres://x --force --pg-url=y" || strings.Join(ids, " ") != "7 8 -9" {
		t.Errorf("splitArgs: flags %q, positional %q", flags, ids)
	}
	unreachable := func(string) string { return "postgres://u:secret@127.0.0.1:1/db" }
	for _, args := range [][]string{
		{"quarantine"}, {"quarantine", "nope"}, {"quarantine", "show"}, {"quarantine", "show", "1", "2"},
		{"quarantine", "replay", "x"}, {"quarantine", "discard", "0"}, {"quarantine", "list", "5"},
		{"jobs", "remove"}, {"jobs", "list", "extra"},
	} {
		var stderr strings.Builder
		if code := cli(context.Background(), args, unreachable, io.Discard, &stderr); code != 2 || strings.Contains(stderr.String(), "reach") {
			t.Errorf("%q: exit %d, want a usage error (2) before connecting: %s", args, code, stderr.String())
		}
	}
}
