package check

import (
	"strings"
	"testing"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// inboxHistory is a gen.CmdInboxRequests's history as the operator made it (issue 35, finding 3):
// target aggregate t, whose v2 (t2) was quarantined, fixed and replayed while v3 and v4 were parked, and a
// control aggregate c; the resolve of the parked t3 was filed with --leave-filed while no runner ran, and the
// runner that started carried it out before the replayed t2 arrived, which was then recorded failed (reason
// skipped) with its WARN.
func inboxHistory() *History {
	h := &History{Start: t0, End: at(30)}
	for _, agg := range []string{"t", "c"} {
		for v := int64(1); v <= 4; v++ {
			id := agg + string(rune('0'+v))
			h.Rows = append(h.Rows, Row{ID: id, Aggregate: "inboxreq/" + agg, Version: v, Op: gen.CmdInboxRequests, Poison: id == "t2"})
			h.Deliv = append(h.Deliv, Delivery{At: at(float64(v)), MessageID: id, Aggregate: "inboxreq/" + agg, Version: v, Replayed: id == "t2"})
		}
	}
	f := &InboxFinal{Consumer: "chaos"}
	seq := int64(0)
	for _, id := range []string{"t1", "c1", "c2", "c3", "c4", "t3", "t4"} {
		seq++
		f.Records = append(f.Records, InboxRecord{EventID: id, Status: "applied", Received: at(float64(seq))})
		f.Applied = append(f.Applied, InboxApplied{Seq: seq, Aggregate: "inboxreq/" + id[:1], Version: int64(id[1] - '0'), EventID: id})
	}
	f.Failed = []InboxFailed{{ID: 1, EventID: "t2", Reason: "skipped", Detail: "this version was skipped at … by inbox request 1"}}
	f.Skipped = []InboxSkip{{Aggregate: "inboxreq/t", From: 2, To: 2, Request: 1, At: at(12)}}
	f.Requests = []InboxRequest{{ID: 1, Target: "t3", State: "done", Taken: true, Outcome: "applied"}}
	h.Inbox = f
	h.Events = []Event{{From: at(10), To: at(20), Kind: gen.CmdInboxRequests, IDs: []string{"t2", "t3"},
		Note: "way=left-filed; file: exit 0: parked t3: request 1 left filed (--leave-filed), not carried out yet: …"}}
	h.Logs = []LogLine{{At: at(13), Router: InboxRouter, Level: "WARN",
		Text: `level=WARN msg="inbox: a version skipped by a resolve arrived; recorded as failed, not applied" event_id=t2 version=2`}}
	return h
}

func inboxBroken(t *testing.T, h *History, detail string) {
	t.Helper()
	for _, v := range checkInboxRequests(h, limits) {
		if strings.Contains(v.Detail, detail) {
			return
		}
	}
	t.Errorf("want a violation with %q, got %v", detail, checkInboxRequests(h, limits))
}

func TestInboxRequestCarriedOutThenSkippedVersionFails(t *testing.T) {
	if vs := checkInboxRequests(inboxHistory(), limits); len(vs) != 0 {
		t.Fatalf("a left-filed resolve carried out, the skipped version recorded failed: %v", vs)
	}
	// The loss of issue 35: the replayed v2 recorded stale, never applied, no failed record.
	h := inboxHistory()
	h.Inbox.Failed = nil
	h.Inbox.Records = append(h.Inbox.Records, InboxRecord{EventID: "t2", Status: "stale", Received: at(13)})
	inboxBroken(t, h, "recorded stale although the projection never applied it")
	// Recorded failed, but silently.
	h = inboxHistory()
	h.Logs = nil
	inboxBroken(t, h, "logged no WARN")
	// Its inbox row's received_at is its transaction's start, which may come before the resolve's while the
	// resolve holds the aggregate's lock (seed 92 under the mutant inbox-skipped-as-stale): stale all the same.
	h = inboxHistory()
	h.Inbox.Failed = nil
	h.Inbox.Records = append(h.Inbox.Records, InboxRecord{EventID: "t2", Status: "stale", Received: at(11)})
	inboxBroken(t, h, "recorded stale although the projection never applied it")
}

func TestInboxProjectionIsExactlyOnceAndComplete(t *testing.T) {
	h := inboxHistory()
	h.Inbox.Applied = append(h.Inbox.Applied, InboxApplied{Seq: 99, Aggregate: "inboxreq/c", Version: 4, EventID: "c4"})
	inboxBroken(t, h, "applied 2 times")
	// A control aggregate, nothing reported, missing a version in the projection and in the inbox.
	h = inboxHistory()
	h.Inbox.Applied = append(h.Inbox.Applied[:3], h.Inbox.Applied[4:]...) // c3
	h.Inbox.Records = append(h.Inbox.Records[:3], h.Inbox.Records[4:]...)
	inboxBroken(t, h, "neither applied, failed nor parked")
	inboxBroken(t, h, "the projection holds [v1 c1, v2 c2, v4 c4], its rows are [v1 c1, v2 c2, v3 c3, v4 c4]")
	// Recorded applied, but the projection's write did not commit with it.
	h = inboxHistory()
	h.Inbox.Applied = append(h.Inbox.Applied[:3], h.Inbox.Applied[4:]...)
	inboxBroken(t, h, "the inbox records it applied, but the projection never applied it")
	// Parked and left so: reported, so the aggregate is not held to its rows.
	h = inboxHistory()
	h.Inbox.Applied = h.Inbox.Applied[:5]
	h.Inbox.Records = append(h.Inbox.Records[:5], InboxRecord{EventID: "t3", Status: "parked"}, InboxRecord{EventID: "t4", Status: "parked"})
	h.Inbox.Parked = []string{"t3", "t4"}
	h.Inbox.Failed, h.Inbox.Skipped = nil, nil
	h.Inbox.Records = append(h.Inbox.Records, InboxRecord{EventID: "t2", Status: "parked"}) // but t2 is not in inbox.parked
	inboxBroken(t, h, "event t2 (inboxreq/t v2): delivered, but the inbox neither applied, failed nor parked it")
	// Versions applied out of order.
	h = inboxHistory()
	h.Inbox.Applied[5].Seq, h.Inbox.Applied[6].Seq = 7, 6
	inboxBroken(t, h, "applied version 3 after version 4")
}

func TestInboxRequestThatExpiredOrWasCancelledIsNeverCarriedOut(t *testing.T) {
	full := func(way, file string, req InboxRequest) *History {
		h := inboxHistory()
		f := h.Inbox
		f.Failed, f.Skipped, h.Logs = nil, nil, nil
		f.Records = append(f.Records[:5], InboxRecord{EventID: "t2", Status: "applied"}, InboxRecord{EventID: "t3", Status: "applied"},
			InboxRecord{EventID: "t4", Status: "applied"})
		f.Applied = append(f.Applied[:5], InboxApplied{Seq: 6, Aggregate: "inboxreq/t", Version: 2, EventID: "t2"},
			InboxApplied{Seq: 7, Aggregate: "inboxreq/t", Version: 3, EventID: "t3"}, InboxApplied{Seq: 8, Aggregate: "inboxreq/t", Version: 4, EventID: "t4"})
		f.Requests = []InboxRequest{req}
		h.Events[0].Note = "way=" + way + "; file: " + file
		return h
	}
	expired := "exit 1: parked t3: request 1 was not carried out within 1s: is an inbox runner … The request has expired and will not be carried out later"
	if vs := checkInboxRequests(full("expired", expired, InboxRequest{ID: 1, State: "expired"}), limits); len(vs) != 0 {
		t.Fatalf("an expired request never taken, v2 replayed and applied: %v", vs)
	}
	inboxBroken(t, full("expired", expired, InboxRequest{ID: 1, State: "done", Taken: true, Outcome: "refused", Error: "…"}),
		"request 1 expired when its command gave up, yet it is done")
	inboxBroken(t, full("expired", "exit 0: parked t3: request 1 left filed …", InboxRequest{ID: 1, State: "expired"}),
		"did not exit 1 saying it expired")
	left := "exit 0: parked t3: request 1 left filed (--leave-filed), not carried out yet"
	listed := "; requests: exit 0: 1 2026-12-05T06:30:00Z chaos@host (role postgres) resolve parked t3 waiting -"
	cancelled := left + listed + "; cancel: exit 0: request 1: cancelled, no runner will carry it out"
	if vs := checkInboxRequests(full("cancelled", cancelled, InboxRequest{ID: 1, State: "cancelled"}), limits); len(vs) != 0 {
		t.Fatalf("a cancelled request never taken: %v", vs)
	}
	inboxBroken(t, full("cancelled", cancelled, InboxRequest{ID: 1, State: "done", Taken: true, Outcome: "applied"}),
		"request 1 was cancelled, yet it is done")
	inboxBroken(t, full("cancelled", left+"; requests: exit 0: requests: 0 (newest first)"+"; cancel: exit 0: …", InboxRequest{ID: 1, State: "cancelled"}),
		"did not list request 1 as waiting")
	// Its missing version applied before a runner took it: refused, changing nothing.
	refused := InboxRequest{ID: 1, State: "done", Taken: true, Outcome: "refused", Error: "event t3 is no longer parked …; nothing skipped"}
	if vs := checkInboxRequests(full("arrived-first", left, refused), limits); len(vs) != 0 {
		t.Fatalf("a request refused, its premise gone: %v", vs)
	}
	inboxBroken(t, full("arrived-first", left, InboxRequest{ID: 1, State: "done", Taken: true, Outcome: "applied"}),
		"was carried out (applied) although the missing version")
	inboxBroken(t, full("arrived-first", left, InboxRequest{ID: 1, State: "done", Taken: true, Outcome: "refused"}),
		"refused without a reason")
	inboxBroken(t, full("left-filed", left, InboxRequest{ID: 1, State: "waiting"}), "was not carried out by the runner that started")
	// No state recorded although the kind ran.
	h := inboxHistory()
	h.Inbox = nil
	inboxBroken(t, h, "the inbox's state was not recorded")
}
