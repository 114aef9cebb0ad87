package quarantine

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/decode"
	"github.com/cdc-router/cdc-router/internal/cdc"
)

// BurstWindow is how long the quarantine records of one kind of burst are aggregated into one.
const BurstWindow = time.Second

// burstReasons start the reasons of the quarantined messages that any role able to log in can emit, as
// many as it likes: non-transactional messages with the prefix, and emitted messages that fail
// authentication. Their records are aggregated per reason and per BurstWindow: one record, the first
// message's, with the number of messages, their bytes and their last LSN in the reason (and the content of
// each message failing authentication, KeptPerRecord at most), so that a flood costs one INSERT per second
// (per KeptPerRecord messages) instead of one per message.
var burstReasons = []string{
	decode.NonTransactionalReason[:strings.Index(decode.NonTransactionalReason, " (")],
	unauthenticated,
}

// unauthenticated starts the reason of an emitted message that fails authentication.
const unauthenticated = "unauthenticated emitted message"

// BurstKind is the reason under which q is aggregated, "" for a record written on its own: its reason up
// to the first digit, so that each distinct refusal (no MAC, a forged MAC, an unknown key, ...) keeps a
// record of its own while numbers a sender chooses (a key id) cannot open a burst per message.
func BurstKind(q cdc.Quarantined) string {
	if !strings.HasPrefix(q.Table, decode.MessageTable) {
		return ""
	}
	reason := strings.TrimPrefix(q.Reason, "message: ") // the decoder's prefix for an envelope it refuses
	for _, r := range burstReasons {
		if strings.HasPrefix(reason, r) {
			if i := strings.IndexAny(reason, "0123456789"); i >= 0 {
				reason = reason[:i]
			}
			return reason
		}
	}
	return ""
}

// KeptPerRecord is how many messages failing authentication one record keeps the content of (each at most
// decode.MaxUnauthenticatedStored bytes, with its length and SHA-256): a burst of them holding so many is
// due at once, and the next such message opens another. An emitted message that fails authentication may
// be a writer's event (signed with a key the router lost), so each one's content is kept.
const KeptPerRecord = 64

// Bursts are the open bursts of a stream: the messages of one kind received in one BurstWindow (at most
// KeptPerRecord of them when each is kept), whose one record is not written yet. H is what each message
// holds until that record is written (the stream's: an unresolved item that holds the acknowledged position).
type Bursts[H any] struct {
	open []*burst[H]
	next int // the index in open of the burst Next returned
}

type burst[H any] struct {
	kind  string
	first cdc.Quarantined
	count int
	bytes int64
	last  cdc.LSN
	began time.Time
	holds []H
	// kept are the contents of the messages after the first, by column name "content <LSN>" (with
	// "#<ordinal>" past the first message at that LSN), when the kind keeps each (keepsEach).
	kept map[string]cdc.RawValue
}

// Burst is the record of a burst due to be written, with what its messages hold.
type Burst[H any] struct {
	// Record is the first message's record; with more than one message, its reason adds their number, the
	// time they span, their last LSN and their bytes of content, and, for messages failing authentication,
	// its columns hold each further message's content as "content <LSN>" beside the first's "content".
	Record cdc.Quarantined
	Kind   string
	Count  int
	Last   cdc.LSN
	Holds  []H
}

// keepsEach reports whether the records of kind keep every message's content: those failing
// authentication, which may be events of a writer. Non-transactional messages are never events, so their
// records keep the first one's.
func keepsEach(kind string) bool { return strings.HasPrefix(kind, unauthenticated) }

// full reports whether the burst keeps as many messages as a record may.
func (o *burst[H]) full() bool { return keepsEach(o.kind) && o.count >= KeptPerRecord }

// Add puts q, of kind (BurstKind), with what it holds, in its kind's open burst, opening one.
func (b *Bursts[H]) Add(q cdc.Quarantined, kind string, h H) {
	var cur *burst[H]
	for _, o := range b.open {
		if o.kind == kind && !o.full() {
			cur = o
		}
	}
	if cur == nil {
		cur = &burst[H]{kind: kind, first: q, began: time.Now()}
		b.open = append(b.open, cur)
	} else if keepsEach(kind) {
		if cur.kept == nil {
			cur.kept = map[string]cdc.RawValue{}
		}
		name := decode.MessageColumn + " " + q.LSN.String()
		if q.Ordinal != 0 {
			name += "#" + strconv.Itoa(q.Ordinal)
		}
		for _, v := range q.Columns {
			cur.kept[name] = v
		}
	}
	cur.count++
	cur.last = q.LSN
	for _, v := range q.Columns {
		cur.bytes += v.Size
	}
	cur.holds = append(cur.holds, h)
}

// Open is the number of open bursts.
func (b *Bursts[H]) Open() int { return len(b.open) }

// Next returns the oldest open burst when its window has passed, or a full one, or the oldest when all is
// set; it stays open until Written, so a record that could not be written is returned again.
func (b *Bursts[H]) Next(all bool) (Burst[H], bool) {
	if len(b.open) == 0 {
		return Burst[H]{}, false
	}
	b.next = 0
	if !all && time.Since(b.open[0].began) < BurstWindow {
		if b.next = slices.IndexFunc(b.open, (*burst[H]).full); b.next < 0 {
			return Burst[H]{}, false
		}
	}
	o := b.open[b.next]
	q := o.first
	if o.count > 1 {
		stored := "only the first is stored"
		if keepsEach(o.kind) {
			stored = "each is stored: the first as content, each other as content <its LSN>"
			q.Columns = maps.Clone(q.Columns)
			maps.Copy(q.Columns, o.kept)
		}
		q.Reason = fmt.Sprintf("%s (one record for %d such messages in %v, up to LSN %s, %d bytes of content in all; %s)",
			q.Reason, o.count, time.Since(o.began).Round(time.Millisecond), o.last, o.bytes, stored)
	}
	return Burst[H]{Record: q, Kind: o.kind, Count: o.count, Last: o.last, Holds: o.holds}, true
}

// Written closes the burst Next returned, once its record is written.
func (b *Bursts[H]) Written() { b.open = slices.Delete(b.open, b.next, b.next+1) }
