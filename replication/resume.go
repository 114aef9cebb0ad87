package replication

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pgserver"
)

// resumePoint carries the progress inside the oldest unacknowledged transaction (an offsets.Mark) from one
// session of a Run to the next, so that a restart inside the process does not publish again what the broker
// already confirmed of that transaction. Before the first session of the process it is empty and the stored
// position's mark stands in for it. It also carries the position the broker confirmed (the tracker's
// watermark), which the next session starts from when the slot and the stored position are behind it.
type resumePoint struct {
	build    string // build.ID(), read once per Run
	set      bool   // a session of this Run ended: mark supersedes the stored one
	mark     offsets.Mark
	config   string
	systemID string
	timeline int32
	acked    cdc.LSN // the last session's watermark: every transaction ending at or before it is confirmed
}

// markConfig is a fingerprint of everything that decides which changes of a transaction the stream turns
// into items (events, quarantined rows, quarantined messages), and in which order: the plugin arguments
// (publication, messages), the outbox tables, their mappings and the message prefix. A mark counted under
// one fingerprint is never applied under another: the same transaction could then have other items, and
// skipping its first k would skip something never published. The router's build is part of it: another
// version may turn other changes into items (a row it quarantines that an older one passed over).
//
// The drift rule (--on-drift) is not: it only decides whether a drifted insert is an item (quarantined) or
// stops the stream (refused, before the handler counts anything), and that is decided again at every read.
// A mark counted under refuse covers items before the transaction's first drifted insert, the same items
// under quarantine; one counted under quarantine, applied under refuse, stops at the first drifted insert
// as refuse does. So the docs' procedure, start once with --on-drift=quarantine, resumes inside the
// transaction the refusal stopped in instead of publishing it again from its start (seeds 197, 8035 and
// 8049 of the harness: 25,000-event transactions published twice).
func markConfig(cfg Config, build string) string {
	d := cfg.Decode
	b, err := json.Marshal(struct {
		Build         string
		Plugin        []string
		Table         string
		Mapping       *decode.Mapping
		MoreTables    []decode.Outbox
		MessagePrefix string
	}{build, pgserver.PluginArgs(cfg.Publication, d.MessagePrefix != ""), decode.QualifiedTable(cfg.Table), d.Mapping,
		d.MoreTables, d.MessagePrefix})
	if err != nil || build == "" {
		return "" // never matches a stored fingerprint: no mark is applied
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}

// choose returns the mark the session starting at start may resume past: this Run's last one, or else the
// stored one, and only when it was counted on this cluster and timeline under this configuration, for a
// transaction the slot will replay (its commit record at or after start). Anything else is ignored, and
// replaced as soon as the session records progress of its own.
func (r *resumePoint) choose(stored offsets.Position, hasStored bool, sys pglogrepl.IdentifySystemResult,
	config string, start cdc.LSN) offsets.Mark {
	m, cfgOf, sysOf, tlOf := stored.Mark, stored.MarkConfig, stored.SystemID, stored.Timeline
	if r.set {
		m, cfgOf, sysOf, tlOf = r.mark, r.config, r.systemID, r.timeline
	} else if !hasStored {
		return offsets.Mark{}
	}
	if m.Confirmed() <= 0 || config == "" || cfgOf != config || sysOf != sys.SystemID || tlOf != sys.Timeline ||
		m.Key.CommitLSN < start {
		return offsets.Mark{}
	}
	return m
}

// standBy forgets this Run's last mark when another router holds the slot: that router's progress, stored
// with the position, is then newer than anything this process counted (seed 8035 of the harness: a router
// that took the slot back resumed a 25,098-event transaction past its own 165 events instead of the other
// router's stored mark, and published the rest again).
func (r *resumePoint) standBy() { *r = resumePoint{build: r.build} }

// record keeps what a session ended with for the next one: its mark and its watermark.
func (r *resumePoint) record(m offsets.Mark, config string, sys pglogrepl.IdentifySystemResult, acked cdc.LSN) {
	*r = resumePoint{build: r.build, set: true, mark: m, config: config, systemID: sys.SystemID, timeline: sys.Timeline,
		acked: acked}
}

// past is the position the next session starts from: start (what the slot and the stored position say),
// or the last session's watermark when it is further on the same cluster and timeline and the slot is not
// a new one (create). The watermark is what the broker confirmed, but it reaches the slot and the stored
// position only with the next status update and write (ack.go): a PostgreSQL failure right after a long
// transaction's last confirm left both before it, and the next session published the whole transaction
// again (the harness's open list, issue 36). PostgreSQL skips every transaction whose commit starts before
// the position START_REPLICATION names, and a promoted standby (another timeline) is never started past.
func (r *resumePoint) past(start cdc.LSN, sys pglogrepl.IdentifySystemResult, create bool) cdc.LSN {
	if create || !r.set || r.systemID != sys.SystemID || r.timeline != sys.Timeline || r.acked <= start {
		return start
	}
	return r.acked
}

// markRefresh is how stale the mark a session reports while it streams may be when the oldest transaction
// has many items in flight (offsets.Tracker.RecentMark): the status loop asks for it at every read, and
// listing tens of thousands of held events each time would cost more than publishing them. A stale mark is
// still true; the stored one is written once a second at most anyway.
const markRefresh = 20 * time.Millisecond

// mark is the progress inside the oldest unacknowledged transaction that the session reports (stored with
// the position and carried to the next session): the tracker's, or, until the replay of the transaction it
// names has begun, the one the session resumes past.
func (s *session) mark() offsets.Mark {
	if s.markBroken {
		return offsets.Mark{}
	}
	if m, ok := s.tracker.RecentMark(markRefresh); ok {
		return m
	}
	if s.resumeAt.Key.CommitLSN < s.tracker.Watermark() {
		return offsets.Mark{} // acknowledged past it (keepalives): its transaction is not replayed any more
	}
	return s.resumeAt
}

// beginResumed opens the transaction of a Begin in the tracker: with the mark the session resumes at, when
// this is its replay, so that the items it covers are passed over (skipped). Once a later transaction
// begins, that mark is dropped: the stream is in commit order, so its transaction will not come in this
// session.
func (s *session) beginResumed(commitLSN cdc.LSN) offsets.Txn {
	key := offsets.TxnKey{CommitLSN: commitLSN, Xid: s.dec.Xid()}
	s.skip = 0
	if m := s.resumeAt; m.Confirmed() > 0 && m.Key == key {
		s.skip, s.resumeAt = max(m.Seen, m.Done), offsets.Mark{}
		s.log.Info("resuming inside a transaction: the events confirmed before the restart are not published again",
			"commit_lsn", commitLSN, "xid", key.Xid, "confirmed", m.Confirmed(), "first_unconfirmed", m.Done,
			"unconfirmed_before_last_confirmed", len(m.Open))
		return s.tracker.BeginAt(key, m)
	} else if m.Confirmed() > 0 && commitLSN >= m.Key.CommitLSN {
		s.resumeAt = offsets.Mark{}
	}
	return s.tracker.BeginAt(key, offsets.Mark{})
}

// skipped reports whether the next item of the open transaction is one the session resumes past (confirmed
// before the restart, counted confirmed again, never published again), and counts it. aggType and aggID
// name an event's aggregate (both empty for another item): once one of its items is published again, its
// later items are too (offsets.Tracker.Pass). skip counts the items of the mark not reached yet.
func (s *session) skipped(aggType, aggID string) bool {
	if !s.inTxn || s.skip == 0 {
		return false
	}
	s.skip--
	group := ""
	if aggType != "" || aggID != "" {
		group = aggType + "\x00" + aggID
	}
	if !s.tracker.Pass(s.cur, group) {
		return false
	}
	s.resumed++
	return true
}
