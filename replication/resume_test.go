package replication

import (
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pglogrepl"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/metrics"
	"github.com/cdc-router/cdc-router/offsets"
)

// TestResumeMarkIsAppliedOnlyWhereItHolds: a mark is resumed past only on the cluster and timeline it was
// counted on, under the same decoding configuration, for a transaction the slot replays; this Run's own
// last mark supersedes the stored one (also when it is empty).
func TestResumeMarkIsAppliedOnlyWhereItHolds(t *testing.T) {
	sys := pglogrepl.IdentifySystemResult{SystemID: "42", Timeline: 2}
	m := offsets.Mark{Key: offsets.TxnKey{CommitLSN: 500, Xid: 7}, Done: 3}
	stored := offsets.Position{LSN: 400, SystemID: "42", Timeline: 2, Mark: m, MarkConfig: "f"}
	with := func(f func(p *offsets.Position)) offsets.Position { p := stored; f(&p); return p }
	cases := []struct {
		name      string
		run       *resumePoint
		stored    offsets.Position
		hasStored bool
		config    string
		start     cdc.LSN
		want      offsets.Mark
	}{
		{"stored, all matching", &resumePoint{}, stored, true, "f", 400, m},
		{"transaction starting at the start", &resumePoint{}, stored, true, "f", 500, m},
		{"nothing stored", &resumePoint{}, stored, false, "f", 400, offsets.Mark{}},
		{"another configuration", &resumePoint{}, stored, true, "g", 400, offsets.Mark{}},
		{"no configuration", &resumePoint{}, with(func(p *offsets.Position) { p.MarkConfig = "" }), true, "", 400, offsets.Mark{}},
		{"another cluster", &resumePoint{}, with(func(p *offsets.Position) { p.SystemID = "43" }), true, "f", 400, offsets.Mark{}},
		{"another timeline", &resumePoint{}, with(func(p *offsets.Position) { p.Timeline = 1 }), true, "f", 400, offsets.Mark{}},
		{"transaction before the start", &resumePoint{}, stored, true, "f", 501, offsets.Mark{}},
		{"this run's empty mark supersedes", &resumePoint{set: true, config: "f", systemID: "42", timeline: 2}, stored, true,
			"f", 400, offsets.Mark{}},
		{"this run's mark supersedes", &resumePoint{set: true, mark: offsets.Mark{Key: m.Key, Done: 9}, config: "f",
			systemID: "42", timeline: 2}, stored, true, "f", 400, offsets.Mark{Key: m.Key, Done: 9}},
		{"this run's mark of another timeline", &resumePoint{set: true, mark: m, config: "f", systemID: "42", timeline: 1},
			stored, true, "f", 400, offsets.Mark{}},
	}
	for _, tc := range cases {
		if got := tc.run.choose(tc.stored, tc.hasStored, sys, tc.config, tc.start); !got.Same(tc.want) {
			t.Errorf("%s: resumes past %+v, want %+v", tc.name, got, tc.want)
		}
	}
	// Seed 8035: after standing by, the stored mark (the other router's, further on) applies, not this Run's.
	r := &resumePoint{build: "b", set: true, mark: offsets.Mark{Key: m.Key, Done: 1}, config: "f", systemID: "42", timeline: 2}
	r.standBy()
	if got := r.choose(stored, true, sys, "f", 400); !got.Same(m) || r.build != "b" {
		t.Errorf("after standing by: resumes past %+v (build %q), want the stored %+v", got, r.build, m)
	}
}

// TestMarkConfigTellsConfigurationsApart: the fingerprint changes with every setting that decides which
// changes become items and with the build, not with the payload limit or the drift rule; an unknown build
// has none.
func TestMarkConfigTellsConfigurationsApart(t *testing.T) {
	base := Config{Table: "public.outbox", Publication: "p"}.WithDefaults()
	base.Decode.Table = base.Table
	f := markConfig(base, "b")
	changed := map[string]func(c *Config){
		"publication":    func(c *Config) { c.Publication = "q" },
		"table":          func(c *Config) { c.Table = "public.other" },
		"more tables":    func(c *Config) { c.Decode.MoreTables = []decode.Outbox{{Table: "public.b"}} },
		"message prefix": func(c *Config) { c.Decode.MessagePrefix = "outbox" },
		"mapping":        func(c *Config) { c.Decode.Mapping = &decode.Mapping{Tombstone: "drop"} },
	}
	for name, change := range changed {
		c := base
		change(&c)
		if markConfig(c, "b") == f {
			t.Errorf("%s changed, fingerprint did not", name)
		}
	}
	c := base
	c.Decode.MaxPayloadBytes = 1 << 10
	if f == "" || markConfig(c, "b") != f {
		t.Errorf("the payload limit changed the fingerprint (or it is empty)")
	}
	c = base
	c.Decode.OnDrift = decode.OnDriftQuarantine // decides only whether a drifted insert stops the stream
	if markConfig(c, "b") != f {
		t.Errorf("the drift rule changed the fingerprint: the start with --on-drift=quarantine after a refusal would publish the transaction again")
	}
	if markConfig(base, "b2") == f || markConfig(base, "") != "" {
		t.Errorf("another build has the same fingerprint, or an unknown build has one")
	}
}

// TestReplayResumesPastItsMark: the replay of the marked transaction passes over the items its mark
// covers (its first Done, and those confirmed beyond, but not the later items of an aggregate with an item
// it does not cover) and counts them confirmed; a transaction that commits before reaching its mark's items
// fails the session and leaves no mark to resume past, so the next run publishes it whole; a later
// transaction drops the mark.
func TestReplayResumesPastItsMark(t *testing.T) {
	newSession := func(m offsets.Mark) *session {
		return &session{tracker: offsets.NewTracker(100), dec: decode.New(decode.Config{}), stats: &metrics.Stats{}, replayMark: replayMark{resumeAt: m},
			log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	m := offsets.Mark{Key: offsets.TxnKey{CommitLSN: 500}, Done: 2, Seen: 2} // a fresh decoder's xid is 0
	s := newSession(m)
	s.Begin(500)
	if !s.skipped("a", "1") || !s.skipped("", "") || s.skipped("a", "2") {
		t.Fatal("the replay did not pass over exactly the mark's two items")
	}
	if got := s.mark(); !got.Same(m) {
		t.Fatalf("mark %+v during the replay, want %+v", got, m)
	}
	if err := s.Commit(500, 600); err != nil || s.tracker.Watermark() != 600 {
		t.Fatalf("Commit = %v, watermark %v; want nil, 0/258", err, s.tracker.Watermark())
	}

	// Items of aggregates h, c1, h, c2: the second of h (item 2) was not confirmed, c2's was.
	s = newSession(offsets.Mark{Key: offsets.TxnKey{CommitLSN: 500}, Done: 2, Seen: 4, Open: []int{2}})
	s.Begin(500)
	var passed []bool
	for _, agg := range []string{"h", "c1", "h", "c2", "h"} {
		skip := s.skipped("account", agg)
		passed = append(passed, skip)
		if !skip {
			s.tracker.Add(s.cur)
		}
	}
	if want := []bool{true, true, false, true, false}; !slices.Equal(passed, want) {
		t.Fatalf("passed over %v, want %v", passed, want)
	}

	s = newSession(m)
	s.Begin(500)
	s.skipped("", "")
	err := s.Commit(500, 600)
	if err == nil || !strings.Contains(err.Error(), "publishing it again whole") {
		t.Fatalf("Commit with an item of the mark missing = %v", err)
	}
	if s.tracker.Watermark() != 100 || !s.mark().Same(offsets.Mark{}) {
		t.Fatalf("watermark %v, mark %+v after a broken replay; want 0/64 and none", s.tracker.Watermark(), s.mark())
	}

	s = newSession(m)
	s.Begin(700)
	if s.skipped("", "") || !s.mark().Same(offsets.Mark{}) {
		t.Fatalf("a later transaction resumed past the mark, or kept it (%+v)", s.mark())
	}
}

// TestRestartStartsPastTheConfirmedPosition (issue 36, the harness's open list): the next session of a Run
// starts from the last session's watermark when the slot and the stored position are behind it (a
// PostgreSQL failure right after a long transaction's last confirm, before the status update and the
// stored position said so), but only on the same cluster and timeline, never for a slot it creates, and not
// after standing by.
func TestRestartStartsPastTheConfirmedPosition(t *testing.T) {
	sys := pglogrepl.IdentifySystemResult{SystemID: "42", Timeline: 2}
	r := &resumePoint{build: "b"}
	if got := r.past(400, sys, false); got != 400 {
		t.Fatalf("before any session: starts at %v, want 0/190", got)
	}
	r.record(offsets.Mark{}, "f", sys, 900)
	cases := []struct {
		name   string
		start  cdc.LSN
		sys    pglogrepl.IdentifySystemResult
		create bool
		want   cdc.LSN
	}{
		{"slot behind the confirmed position", 400, sys, false, 900},
		{"slot further on", 1000, sys, false, 1000},
		{"another timeline (a promoted standby)", 400, pglogrepl.IdentifySystemResult{SystemID: "42", Timeline: 3}, false, 400},
		{"another cluster", 400, pglogrepl.IdentifySystemResult{SystemID: "43", Timeline: 2}, false, 400},
		{"a slot created anew", 400, sys, true, 400},
	}
	for _, tc := range cases {
		if got := r.past(tc.start, tc.sys, tc.create); got != tc.want {
			t.Errorf("%s: starts at %v, want %v", tc.name, got, tc.want)
		}
	}
	r.standBy()
	if got := r.past(400, sys, false); got != 400 {
		t.Errorf("after standing by: starts at %v, want the slot's 0/190", got)
	}
}
