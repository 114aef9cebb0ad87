package metrics

import (
	"log/slog"
	"math"
	"time"
)

// DefaultProgressInterval is how often a streaming router logs what it did, at info level.
const DefaultProgressInterval = time.Minute

// ProgressLog writes one info line per interval while the stream runs, so that a router under steady
// traffic shows it is working without a line per event: what was published and quarantined since the
// last line, the rate, the lag (in time and bytes) and the acknowledged position. It writes nothing while
// nothing happened and nothing waits; a stalled router (events waiting, none confirmed) still logs, with
// published=0 and a growing lag.
type ProgressLog struct {
	log         *slog.Logger
	stats       *Stats
	interval    time.Duration
	next        time.Time
	last        time.Time
	published   int64
	quarantined int64
}

// NewProgressLog starts the line's first interval now, from what stats counted so far.
func NewProgressLog(log *slog.Logger, stats *Stats, interval time.Duration) *ProgressLog {
	now := time.Now()
	return &ProgressLog{log: log, stats: stats, interval: interval, next: now.Add(interval), last: now,
		published: stats.Published(), quarantined: stats.Quarantined()}
}

// Due logs the line when the interval has passed.
func (p *ProgressLog) Due() {
	now := time.Now()
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(p.interval)
	published, quarantined := p.stats.Published(), p.stats.Quarantined()
	lag := p.stats.Lag()
	elapsed := now.Sub(p.last)
	p.last = now
	if published == p.published && quarantined == p.quarantined && lag == 0 {
		return
	}
	rate := float64(published-p.published) / elapsed.Seconds()
	attrs := []any{"published", published - p.published, "quarantined", quarantined - p.quarantined,
		"rate_per_second", math.Round(rate*10) / 10, "lag", lag.Round(time.Millisecond), "lsn", p.stats.Acknowledged(),
		"interval", elapsed.Round(time.Millisecond)}
	if bytes, ok := p.stats.LagBytes(); ok {
		attrs = append(attrs, "lag_bytes", bytes)
	}
	p.log.Info("progress", attrs...)
	p.published, p.quarantined = published, quarantined
}
