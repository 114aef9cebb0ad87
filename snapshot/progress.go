package snapshot

import (
	"fmt"
	"io"
	"log/slog"
	"time"
)

// Reporter shows a job's progress: rows done, total, rate and time left, as a progress line on a terminal
// and as one log line every few seconds ("snapshot progress", "snapshot finished" for an initial snapshot,
// "backfill progress", "backfill finished" for a backfill).
type Reporter struct {
	// Observe, when set, is called with every update (for health and metrics endpoints).
	Observe func(done, total int64)

	log      *slog.Logger
	term     io.Writer // nil unless stderr is a terminal
	every    time.Duration
	name     string
	began    time.Time
	baseline int64 // rows done when this process started (a resumed job)
	lastLog  time.Time
	lastTerm time.Time
}

// NewReporter reports for job name; term may be nil.
func NewReporter(log *slog.Logger, term io.Writer, name string, done int64) *Reporter {
	now := time.Now()
	return &Reporter{log: log, term: term, every: 5 * time.Second, name: name, began: now, baseline: done,
		lastLog: now, lastTerm: now}
}

// rate is rows per second published by this process.
func (r *Reporter) rate(done int64) float64 {
	secs := time.Since(r.began).Seconds()
	if secs <= 0 {
		return 0
	}
	return float64(done-r.baseline) / secs
}

func eta(done, total int64, rate float64) time.Duration {
	if rate <= 0 || total <= done {
		return 0
	}
	return time.Duration(float64(total-done) / rate * float64(time.Second)).Round(time.Second)
}

// Update is called as rows are confirmed; it prints at most every few seconds.
func (r *Reporter) Update(done, total int64) {
	if r.Observe != nil {
		r.Observe(done, total)
	}
	now := time.Now()
	rate := r.rate(done)
	if r.term != nil && now.Sub(r.lastTerm) >= 200*time.Millisecond {
		pct := 0.0
		if total > 0 {
			pct = 100 * float64(done) / float64(total)
		}
		fmt.Fprintf(r.term, "\r%s: %d/%d rows (%.1f%%), %.0f rows/s, %v left   ", r.name, done, total, pct, rate,
			eta(done, total, rate))
		r.lastTerm = now
	}
	if now.Sub(r.lastLog) >= r.every {
		r.log.Info(word(r.name)+" progress", "job", r.name, "rows_done", done, "rows_total", total,
			"rows_per_second", int64(rate), "time_left", eta(done, total, rate).String())
		r.lastLog = now
	}
}

// Finish prints the final line.
func (r *Reporter) Finish(done int64) {
	if r.term != nil {
		fmt.Fprintln(r.term)
	}
	r.log.Info(word(r.name)+" finished", "job", r.name, "rows_done", done, "rows_per_second", int64(r.rate(done)),
		"took", time.Since(r.began).Round(time.Millisecond).String())
}
