package quarantine

import (
	"fmt"
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
// message's, with the number of messages, their bytes and their last LSN in the reason, so that a flood
// costs one INSERT per second instead of one per message.
var burstReasons = []string{
	decode.NonTransactionalReason[:strings.Index(decode.NonTransactionalReason, " (")],
	"unauthenticated emitted message",
}

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

// Bursts are the open bursts of a stream, at most one per kind: the messages of one kind received in one
// BurstWindow, whose one record is not written yet. H is what each message holds until that record is
// written (the stream's: an unresolved item that holds the acknowledged position).
type Bursts[H any] struct{ open []*burst[H] }

type burst[H any] struct {
	kind  string
	first cdc.Quarantined
	count int
	bytes int64
	last  cdc.LSN
	began time.Time
	holds []H
}

// Burst is the record of a burst due to be written, with what its messages hold.
type Burst[H any] struct {
	// Record is the first message's record; with more than one message, its reason adds their number, the
	// time they span, their last LSN and their bytes of content.
	Record cdc.Quarantined
	Kind   string
	Count  int
	Last   cdc.LSN
	Holds  []H
}

// Add puts q, of kind (BurstKind), with what it holds, in its kind's open burst, opening one.
func (b *Bursts[H]) Add(q cdc.Quarantined, kind string, h H) {
	var cur *burst[H]
	for _, o := range b.open {
		if o.kind == kind {
			cur = o
		}
	}
	if cur == nil {
		cur = &burst[H]{kind: kind, first: q, began: time.Now()}
		b.open = append(b.open, cur)
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

// Next returns the oldest open burst when its window has passed, or when all is set; it stays open until
// Written, so a record that could not be written is returned again.
func (b *Bursts[H]) Next(all bool) (Burst[H], bool) {
	if len(b.open) == 0 || !all && time.Since(b.open[0].began) < BurstWindow {
		return Burst[H]{}, false
	}
	o := b.open[0]
	q := o.first
	if o.count > 1 {
		q.Reason = fmt.Sprintf("%s (one record for %d such messages in %v, up to LSN %s, %d bytes of content in all; "+
			"only the first is stored)", q.Reason, o.count, time.Since(o.began).Round(time.Millisecond), o.last, o.bytes)
	}
	return Burst[H]{Record: q, Kind: o.kind, Count: o.count, Last: o.last, Holds: o.holds}, true
}

// Written closes the burst Next returned, once its record is written.
func (b *Bursts[H]) Written() { b.open = b.open[1:] }
