package check

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/gen"
)

// InboxRouter is the Router of the log lines of the harness's inbox runner (gen.CmdInboxRequests), which runs
// in the harness's own process.
const InboxRouter = -2

// InboxFinal is what the inbox of a gen.CmdInboxRequests held at the end of the run, read once its last
// runner stopped: the consumer's records, its projection and the requests filed for it.
type InboxFinal struct {
	Consumer string
	Read     string // why the state could not be read ("" when it was)
	Records  []InboxRecord
	Failed   []InboxFailed
	Parked   []string       // event ids in inbox.parked
	Applied  []InboxApplied // the projection: one row per handler run that committed, in commit order
	Skipped  []InboxSkip
	Requests []InboxRequest
}

// InboxRecord is one row of inbox.inbox: an event id the consumer received, and what became of it.
type InboxRecord struct {
	EventID  string
	Status   string // applied, stale, parked, skipped
	Received time.Time
}

// InboxFailed is one row of inbox.failed.
type InboxFailed struct {
	ID         int64
	EventID    string
	Reason     string
	Detail     string
	Resolution string // "" while open
}

// InboxApplied is one row of the kind's projection: the handler ran for event EventID, version Version of
// Aggregate (aggregate_type/aggregate_id), and its transaction committed.
type InboxApplied struct {
	Seq       int64
	Aggregate string
	Version   int64
	EventID   string
}

// InboxSkip is one row of inbox.skipped: versions From..To of Aggregate given up by a resolve.
type InboxSkip struct {
	Aggregate string
	From, To  int64
	Request   int64
	At        time.Time
}

// InboxRequest is one row of inbox.requests as it stood at the end.
type InboxRequest struct {
	ID      int64
	Target  string
	State   string // waiting, taken, done, cancelled, expired
	Taken   bool   // a runner took it (taken_at is set)
	Outcome string
	Error   string
}

// skippedWarnRe finds the event id in the inbox's WARN of a skipped version that arrived.
var skippedWarnRe = regexp.MustCompile(` event_id=(\S+)`)

// inboxRequestRe finds the request id in an inbox command's output ("… request 3 …").
var inboxRequestRe = regexp.MustCompile(`request (\d+)`)

// InboxRequestID is the id of the request that an inbox command's output names, "" when it names none.
func InboxRequestID(out string) string {
	if m := inboxRequestRe.FindStringSubmatch(out); m != nil {
		return m[1]
	}
	return ""
}

// checkInboxRequests (issue 35, finding 3) holds the inbox and its requests to docs/consumers.md: every row
// of a gen.CmdInboxRequests that the routers delivered is applied by the projection exactly once, or recorded
// as failed (with a reason) or parked; none is recorded stale that was never applied (a version a resolve
// skipped that arrives afterwards is failed, reason skipped, with a WARN naming it), except a version that
// was parked before the resolve gave it up; the projection applies each aggregate's versions in order and,
// for every aggregate none of whose events is so reported, equals the rows; and the operator's request does
// what the command said: one that expired or was cancelled is never carried out, one left filed is carried
// out or refused with a reason by the runner that starts, and one whose missing version arrived first is
// refused.
func checkInboxRequests(h *History, _ Limits) []Violation {
	f := h.Inbox
	var kinds []Event
	for _, e := range h.Events {
		if e.Kind == gen.CmdInboxRequests {
			kinds = append(kinds, e)
		}
	}
	if f == nil {
		for _, e := range kinds {
			if !strings.HasPrefix(e.Note, "skipped") {
				return []Violation{{Detail: "an inbox-requests kind ran, but the inbox's state was not recorded", At: e.From}}
			}
		}
		return nil // skipped before its consumer was set up
	}
	if f.Read != "" {
		return []Violation{{Detail: "the inbox's state could not be read: " + f.Read}}
	}
	vs := inboxEvents(h, f)
	vs = append(vs, inboxProjection(h, f)...)
	for _, e := range kinds {
		vs = append(vs, inboxRequest(h, f, e)...)
	}
	return compress(vs, 10)
}

// inboxEvents: each delivered row of the kind applied once, or failed with a reason, or parked; never stale
// unapplied.
func inboxEvents(h *History, f *InboxFinal) []Violation {
	delivered := map[string]bool{}
	for _, d := range h.Deliv {
		delivered[d.MessageID] = true
	}
	applied := map[string][]InboxApplied{}
	for _, a := range f.Applied {
		applied[a.EventID] = append(applied[a.EventID], a)
	}
	status := map[string]string{}
	for _, r := range f.Records {
		status[r.EventID] = r.Status
	}
	failed := map[string]InboxFailed{}
	for _, x := range f.Failed {
		failed[x.EventID] = x
	}
	parked := map[string]bool{}
	for _, id := range f.Parked {
		parked[id] = true
	}
	warned := map[string]bool{}
	for _, l := range h.Logs {
		if l.Router == InboxRouter && strings.Contains(l.Text, "a version skipped by a resolve arrived") {
			if m := skippedWarnRe.FindStringSubmatch(l.Text); m != nil {
				warned[m[1]] = true
			}
		}
	}
	var vs []Violation
	written := map[string]Row{}
	for _, r := range h.Rows {
		if r.Op != gen.CmdInboxRequests {
			continue
		}
		written[r.ID] = r
		if !delivered[r.ID] {
			continue // invariant 1's
		}
		as, st, fl := applied[r.ID], status[r.ID], failed[r.ID]
		bad := func(format string, args ...any) {
			vs = append(vs, Violation{Detail: fmt.Sprintf("event %s (%s v%d): ", r.ID, r.Aggregate, r.Version) +
				fmt.Sprintf(format, args...), Aggregate: r.Aggregate})
		}
		switch {
		case len(as) > 1:
			bad("applied %d times by the projection", len(as))
		case len(as) == 1 && st != "applied":
			bad("in the projection, but the inbox records it %q", st)
		case len(as) == 1 && (as[0].Aggregate != r.Aggregate || as[0].Version != r.Version):
			bad("the projection applied it as %s v%d", as[0].Aggregate, as[0].Version)
		case len(as) == 1:
		case st == "applied":
			bad("the inbox records it applied, but the projection never applied it")
		case st == "stale":
			// The kind resolves the lowest parked version, so no version of it was parked below the one
			// resolved (ResolveParked makes those stale, docs/consumers.md): a stale one arrived after the
			// resolve. Its inbox row's received_at cannot tell (seed 92 under the mutant
			// inbox-skipped-as-stale): it is its transaction's start, which may precede the resolve's
			// while the resolve holds the aggregate's lock.
			bad("recorded stale although the projection never applied it (a version a resolve skipped must be recorded failed, reason skipped)")
		case fl.EventID != "" && (strings.TrimSpace(fl.Reason) == "" || strings.TrimSpace(fl.Detail) == ""):
			bad("recorded failed without a reason (reason %q, detail %q)", fl.Reason, fl.Detail)
		case fl.Reason == "skipped" && !warned[r.ID]:
			bad("recorded failed, reason skipped, but the runner logged no WARN naming it")
		case fl.EventID != "":
		case st == "parked" && parked[r.ID]:
		default:
			bad("delivered, but the inbox neither applied, failed nor parked it (its record: %q)", st)
		}
	}
	for id, as := range applied {
		if _, ok := written[id]; !ok {
			vs = append(vs, Violation{Detail: fmt.Sprintf("the projection applied event %s (%s v%d), which no row of the kind is",
				id, as[0].Aggregate, as[0].Version)})
		}
	}
	return vs
}

// inboxProjection: each aggregate's versions applied in increasing order, and equal to its rows where none
// of its events is reported (failed, parked, given up).
func inboxProjection(h *History, f *InboxFinal) []Violation {
	delivered := map[string]bool{}
	for _, d := range h.Deliv {
		delivered[d.MessageID] = true
	}
	rows := map[string][]Row{}
	for _, r := range h.Rows {
		if r.Op == gen.CmdInboxRequests {
			rows[r.Aggregate] = append(rows[r.Aggregate], r)
		}
	}
	reported := map[string]bool{}
	byID := map[string]string{}
	for _, rs := range rows {
		for _, r := range rs {
			byID[r.ID] = r.Aggregate
		}
	}
	for _, x := range f.Failed {
		reported[byID[x.EventID]] = true
	}
	for _, id := range f.Parked {
		reported[byID[id]] = true
	}
	for _, s := range f.Skipped {
		reported[s.Aggregate] = true
	}
	got := map[string][]InboxApplied{}
	for _, a := range f.Applied {
		got[a.Aggregate] = append(got[a.Aggregate], a)
	}
	var vs []Violation
	for agg, as := range got {
		sort.Slice(as, func(i, j int) bool { return as[i].Seq < as[j].Seq })
		for i := 1; i < len(as); i++ {
			if as[i].Version <= as[i-1].Version {
				vs = append(vs, Violation{Detail: fmt.Sprintf("aggregate %s: the projection applied version %d after version %d",
					agg, as[i].Version, as[i-1].Version), Aggregate: agg})
				break
			}
		}
	}
	for agg, rs := range rows {
		all := true
		for _, r := range rs {
			all = all && delivered[r.ID]
		}
		if !all || reported[agg] {
			continue
		}
		sort.Slice(rs, func(i, j int) bool { return rs[i].Version < rs[j].Version })
		var want, have []string
		for _, r := range rs {
			want = append(want, fmt.Sprintf("v%d %s", r.Version, r.ID))
		}
		for _, a := range got[agg] {
			have = append(have, fmt.Sprintf("v%d %s", a.Version, a.EventID))
		}
		if strings.Join(want, ", ") != strings.Join(have, ", ") {
			vs = append(vs, Violation{Detail: fmt.Sprintf("aggregate %s, none of its events reported failed, parked or given up: "+
				"the projection holds [%s], its rows are [%s]", agg, strings.Join(have, ", "), strings.Join(want, ", ")), Aggregate: agg})
		}
	}
	return vs
}

// inboxRequest: the request of kind event e did what its command said. e.Note is "way=W; file: exit N: …"
// with, for the way cancelled, "; requests: exit N: <the request's line>; cancel: exit N: …"; a kind that did not get to file its request is
// "skipped: …" (its events are still judged).
func inboxRequest(h *History, f *InboxFinal, e Event) []Violation {
	if strings.HasPrefix(e.Note, "skipped") {
		return nil
	}
	way, _, _ := strings.Cut(strings.TrimPrefix(e.Note, "way="), ";")
	_, file, _ := strings.Cut(e.Note, "file: ")
	file, _, _ = strings.Cut(file, "; cancel: ")
	id := InboxRequestID(file)
	bad := func(format string, args ...any) []Violation {
		return []Violation{{Detail: fmt.Sprintf("inbox request (%s, at +%.2fs): ", way, e.From.Sub(h.Start).Seconds()) +
			fmt.Sprintf(format, args...), At: e.From}}
	}
	if id == "" {
		if lostServer(file) {
			return nil // PostgreSQL was away: nothing was filed
		}
		return bad("the command named no request: %s", file)
	}
	var req *InboxRequest
	for i := range f.Requests {
		if fmt.Sprint(f.Requests[i].ID) == id {
			req = &f.Requests[i]
		}
	}
	if req == nil {
		return bad("request %s is not in inbox.requests", id)
	}
	switch way {
	case gen.InboxRequestWays[gen.InboxExpired]:
		if !strings.HasPrefix(file, "exit 1") || !strings.Contains(file, "has expired") {
			return bad("filed without --leave-filed while no runner ran, the command did not exit 1 saying it expired: %s", file)
		}
		if req.Taken || req.State != "expired" {
			return bad("request %s expired when its command gave up, yet it is %s (outcome %q %s)", id, req.State, req.Outcome, req.Error)
		}
	case gen.InboxRequestWays[gen.InboxCancelled]:
		_, cancel, _ := strings.Cut(e.Note, "; cancel: ")
		_, listed, _ := strings.Cut(e.Note, "; requests: ")
		listed, _, _ = strings.Cut(listed, "; cancel: ")
		if !strings.HasPrefix(listed, "exit 0") || !strings.Contains(listed, " "+id+" ") && !strings.Contains(listed, ": "+id+" ") ||
			!strings.Contains(listed, " waiting ") {
			return bad("`inbox requests` did not list request %s as waiting: %s", id, listed)
		}
		if !strings.HasPrefix(cancel, "exit 0") {
			return bad("`inbox cancel %s` of a waiting request failed: %s", id, cancel)
		}
		if req.Taken || req.State != "cancelled" {
			return bad("request %s was cancelled, yet it is %s (outcome %q %s)", id, req.State, req.Outcome, req.Error)
		}
	case gen.InboxRequestWays[gen.InboxLeftFiled], gen.InboxRequestWays[gen.InboxArrivedFirst]:
		if !strings.HasPrefix(file, "exit 0") || !strings.Contains(file, "left filed") {
			return bad("filed with --leave-filed while no runner ran, the command did not say it was left filed: %s", file)
		}
		switch {
		case req.State != "done":
			return bad("request %s, left filed, was not carried out by the runner that started: %s", id, req.State)
		case req.Outcome == "refused" && strings.TrimSpace(req.Error) == "":
			return bad("request %s was refused without a reason", id)
		case way == gen.InboxRequestWays[gen.InboxArrivedFirst] && req.Outcome != "refused" && req.Outcome != "error":
			return bad("request %s was carried out (%s) although the missing version it would skip had been applied before a runner took it", id, req.Outcome)
		}
	default:
		return bad("unknown way in %q", e.Note)
	}
	return nil
}

// inboxCoverage counts what a gen.CmdInboxRequests did: its requests by state and outcome
// (seen:inbox-request-done-refused, …-expired, …), the versions recorded failed because a resolve had given
// them up (seen:inbox-skipped-then-failed) and the events the projection applied.
func inboxCoverage(h *History) map[string]int {
	c := map[string]int{}
	if h.Inbox == nil {
		return c
	}
	for _, r := range h.Inbox.Requests {
		k := "seen:inbox-request-" + r.State
		if r.Outcome != "" {
			k += "-" + r.Outcome
		}
		c[k]++
	}
	for _, f := range h.Inbox.Failed {
		if f.Reason == "skipped" {
			c["seen:inbox-skipped-then-failed"]++
		}
	}
	c["seen:inbox-applied"] += len(h.Inbox.Applied)
	return c
}
