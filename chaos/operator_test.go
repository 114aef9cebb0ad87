package chaos

import (
	"reflect"
	"testing"

	"github.com/cdc-router/cdc-router/chaos/check"
)

func TestGapBackfillsFromTheLog(t *testing.T) {
	line := "time=2026-12-01T22:00:00Z level=ERROR msg=\"publication gap: the outbox table public.outbox may have been out " +
		"of publication \\\"cdc_router_outbox\\\" (dropped from it and added back) between 2026-12-01 21:59:58Z and " +
		"2026-12-01 22:00:00Z, so rows inserted then were never streamed and never will be: publish them with " +
		"`cdc-router backfill --slot s1 --where \\\"occurred_at >= '2026-12-01 21:59:58Z' AND occurred_at < " +
		"'2026-12-01 22:00:01Z'\\\"` (consumers drop the duplicates)\" publication=cdc_router_outbox"
	logs := []check.LogLine{{Router: 0, Text: line}, {Router: 0, Text: line}, {Router: -1, Text: line}}
	cmds := gapBackfills(logs)
	if len(cmds) != 1 {
		t.Fatalf("commands: %q", cmds)
	}
	args, ok := backfillArgs(cmds[0])
	want := []string{"backfill", "--slot", "s1", "--where", "occurred_at >= '2026-12-01 21:59:58Z' AND occurred_at < '2026-12-01 22:00:01Z'"}
	if !ok || !reflect.DeepEqual(args, want) {
		t.Fatalf("args %q, want %q", args, want)
	}
	// Since seed 8126 a gap names the rows by their inserting transaction.
	byXid := "time=2026-12-03T18:13:58Z level=ERROR msg=\"publication gap: the outbox table public.outbox_b may have been out " +
		"of publication \\\"cdc_router_outbox\\\" (dropped from it and added back) between 2026-12-03 18:13:54Z and " +
		"2026-12-03 18:13:58Z, so rows inserted then by transactions 732 to 734 were never streamed and never will be: publish " +
		"them with `cdc-router backfill --table public.outbox_b --where \\\"age(xmin) <= age('732'::xid) AND age(xmin) > " +
		"age('735'::xid)\\\"` (consumers drop the duplicates)\" publication=cdc_router_outbox"
	cmds = gapBackfills([]check.LogLine{{Router: 1, Text: byXid}})
	args, ok = backfillArgs(cmds[0])
	want = []string{"backfill", "--table", "public.outbox_b", "--where", "age(xmin) <= age('732'::xid) AND age(xmin) > age('735'::xid)"}
	if len(cmds) != 1 || !ok || !reflect.DeepEqual(args, want) {
		t.Fatalf("by transaction: commands %q, args %q, want %q", cmds, args, want)
	}
	if _, ok := backfillArgs("cdc-router backfill --config <its file> --where \"x\""); ok {
		t.Fatal("a placeholder was taken for an argument")
	}
}
