package replication

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"github.com/jackc/pglogrepl"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/offsets"
	"github.com/cdc-router/cdc-router/pgserver"
)

// resumePoint carries the progress inside the oldest unacknowledged transaction (an offsets.Mark) from one
// session of a Run to the next, so that a restart inside the process does not publish again what the broker
// already confirmed of that transaction. Before the first session of the process it is empty and the stored
// position's mark stands in for it.
type resumePoint struct {
	build    string // build.ID(), read once per Run
	set      bool   // a session of this Run ended: mark supersedes the stored one
	mark     offsets.Mark
	config   string
	systemID string
	timeline int32
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
	if m.Done <= 0 || config == "" || cfgOf != config || sysOf != sys.SystemID || tlOf != sys.Timeline ||
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

// record keeps what a session ended with for the next one.
func (r *resumePoint) record(m offsets.Mark, config string, sys pglogrepl.IdentifySystemResult) {
	*r = resumePoint{build: r.build, set: true, mark: m, config: config, systemID: sys.SystemID, timeline: sys.Timeline}
}

// mark is the progress inside the oldest unacknowledged transaction that the session reports (stored with
// the position and carried to the next session): the tracker's, or, until the replay of the transaction it
// names has begun, the one the session resumes past.
func (s *session) mark() offsets.Mark {
	if s.markBroken {
		return offsets.Mark{}
	}
	if m, ok := s.tracker.Mark(); ok {
		return m
	}
	if s.resumeAt.Key.CommitLSN < s.tracker.Watermark() {
		return offsets.Mark{} // acknowledged past it (keepalives): its transaction is not replayed any more
	}
	return s.resumeAt
}

// beginResumed opens the transaction of a Begin in the tracker: past the first items of the mark the
// session resumes at, when this is its replay. Once a later transaction begins, that mark is dropped: the
// stream is in commit order, so its transaction will not come in this session.
func (s *session) beginResumed(commitLSN cdc.LSN) offsets.Txn {
	key := offsets.TxnKey{CommitLSN: commitLSN, Xid: s.dec.Xid()}
	s.skip = 0
	if m := s.resumeAt; m.Done > 0 && m.Key == key {
		s.skip, s.resumeAt = m.Done, offsets.Mark{}
		s.log.Info("resuming inside a transaction: its first events were confirmed before the restart and are not "+
			"published again", "commit_lsn", commitLSN, "xid", key.Xid, "skipped", m.Done)
		return s.tracker.BeginAt(key, m.Done)
	} else if m.Done > 0 && commitLSN >= m.Key.CommitLSN {
		s.resumeAt = offsets.Mark{}
	}
	return s.tracker.BeginAt(key, 0)
}

// skipped reports whether the next item of the open transaction is one the session resumes past (counted
// confirmed at Begin, never published again), and counts it.
func (s *session) skipped() bool {
	if !s.inTxn || s.skip == 0 {
		return false
	}
	s.skip--
	s.resumed++
	return true
}
