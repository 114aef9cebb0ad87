package chaos

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// gapBackfillRe finds the backfill a publication gap names, in the ERROR line a running router logs and in
// the refusal of its next start alike: "… publish them with `cdc-router backfill … --where "…"` …".
var gapBackfillRe = regexp.MustCompile("publish them with `(cdc-router backfill [^`]+)`")

// gapBackfills are the distinct backfill commands that the log lines of routers name, in order.
func gapBackfills(lines []check.LogLine) []string {
	seen := map[string]bool{}
	var out []string
	for _, l := range lines {
		if l.Router < 0 || !strings.Contains(l.Text, "publication gap") && !strings.Contains(l.Text, "may have been out of publication") {
			continue
		}
		m := gapBackfillRe.FindStringSubmatch(l.Text)
		if m == nil {
			continue
		}
		cmd := m[1]
		if u, err := strconv.Unquote(`"` + cmd + `"`); err == nil { // slog's text format escapes the inner quotes
			cmd = u
		}
		if !seen[cmd] {
			seen[cmd] = true
			out = append(out, cmd)
		}
	}
	return out
}

// backfillArgs turns a named command, `cdc-router backfill [--slot S] [--table T] --where "P"`, into the
// arguments of the binary; ok is false for a command of another form (a --config placeholder).
func backfillArgs(cmd string) (args []string, ok bool) {
	head, where, found := strings.Cut(cmd, ` --where "`)
	if !found || !strings.HasSuffix(where, `"`) || strings.Contains(head, "<") {
		return nil, false
	}
	args = strings.Fields(strings.TrimPrefix(head, "cdc-router "))
	return append(args, "--where", strings.TrimSuffix(where, `"`)), true
}

// operate plays the operator of docs/howto/change-the-outbox-schema.md#publication-gaps until stop is closed: each backfill a
// router's publication-gap ERROR (or refusal) names is run as named, with the world's broker flags, and
// run again (it resumes) until it succeeds, as an operator would: after a failure it waits twice as long
// as before (from half a second up to backfillRetryCap), for at most backfillAttempts tries, so that a
// broker or PostgreSQL outage longer than a few seconds (a SIGKILL of the node takes 10–23 s to heal here)
// does not leave the gap unbackfilled and the routers refusing to start for the rest of the run (seed
// 5024). Each attempt is recorded (CmdGapBackfill).
func (w *world) operate(stop <-chan struct{}) {
	tries := map[string]int{} // attempts; -1 once it succeeded
	next := map[string]time.Time{}
	for {
		select {
		case <-stop:
			return
		case <-time.After(500 * time.Millisecond):
		}
		var cmds []string
		w.rec.With(func(h *check.History) { cmds = gapBackfills(h.Logs) })
		for _, cmd := range cmds {
			if tries[cmd] < 0 || tries[cmd] >= backfillAttempts || time.Now().Before(next[cmd]) {
				continue
			}
			from := time.Now()
			args, ok := backfillArgs(cmd)
			if !ok {
				tries[cmd] = backfillAttempts
				w.rec.Event(check.Event{From: from, To: from, Kind: gen.CmdGapBackfill, Note: "not run, a form the harness cannot run: " + cmd})
				continue
			}
			out, code := w.cli(3*time.Minute, w.backfillFlags(args...)...)
			tries[cmd]++
			next[cmd] = time.Now().Add(min(backfillRetryCap, 250*time.Millisecond<<tries[cmd]))
			if code == 0 {
				tries[cmd] = -1
			}
			w.rec.Event(check.Event{From: from, To: time.Now(), Kind: gen.CmdGapBackfill, Note: fmt.Sprintf("exit %d: %s", code, outcome(out))})
		}
	}
}

// backfillAttempts and backfillRetryCap bound operate's retries of one backfill: 12 tries, the last ones
// 8 s apart, span about a minute of outages.
const (
	backfillAttempts = 12
	backfillRetryCap = 8 * time.Second
)

// refusalRetry is the routers' and backfills' --refusal-retry with the full queue: short, so that an event
// the full queue nacks is quarantined within the run.
const refusalRetry = "2s"

// backfillFlags is a backfill command's arguments with the world's broker flags added.
func (w *world) backfillFlags(args ...string) []string {
	args = append(args, "--unroutable-queue-type", w.plan.Setup.UnroutableType)
	if w.shortRefusals() {
		args = append(args, "--refusal-retry", refusalRetry)
	}
	return args
}

// shortRefusals reports whether the world's broker refuses events on purpose (the full queue, the topic's
// exchange taken away, a queue-length policy), so that the routers and commands retry them for refusalRetry only.
func (w *world) shortRefusals() bool {
	return w.plan.Setup.FullQueue || w.plan.Setup.ExchangeByTopic || w.plan.Has(gen.FaultQueuePolicy)
}

// replayArgs is quarantine replay of records ids with the world's broker flags (before the ids: Go's flag
// parsing stops at the first positional argument).
func (w *world) replayArgs(ids []string) []string {
	return append(append(w.backfillFlags("quarantine", "replay"), w.mappingFlags()...), ids...)
}

// outcome is what a command printed on stdout (its lines that are not log lines), or its last line.
func outcome(out string) string {
	var said []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "time=") {
			said = append(said, l)
		}
	}
	if len(said) == 0 {
		return lastLine(out)
	}
	return check.Trim(strings.Join(said, "; "), 300)
}
