package replication

import (
	"log/slog"
	"time"
)

// DefaultProgressInterval is how often a streaming router logs what it did, at info level.
const DefaultProgressInterval = time.Minute

// progressLog writes one info line per interval while the stream runs, so that a router under steady
// traffic shows it is working without a line per event: what was published and quarantined since the
// last line, and the acknowledged position. It writes nothing while nothing happened.
type progressLog struct {
	log         *slog.Logger
	stats       *Stats
	interval    time.Duration
	next        time.Time
	published   int64
	quarantined int64
}

func newProgressLog(log *slog.Logger, stats *Stats, interval time.Duration) *progressLog {
	return &progressLog{log: log, stats: stats, interval: interval, next: time.Now().Add(interval),
		published: stats.Published(), quarantined: stats.Quarantined()}
}

// due logs the line when the interval has passed.
func (p *progressLog) due() {
	now := time.Now()
	if now.Before(p.next) {
		return
	}
	p.next = now.Add(p.interval)
	published, quarantined := p.stats.Published(), p.stats.Quarantined()
	if published == p.published && quarantined == p.quarantined {
		return
	}
	p.log.Info("progress", "published", published-p.published, "quarantined", quarantined-p.quarantined,
		"lsn", p.stats.Acknowledged(), "interval", p.interval.String())
	p.published, p.quarantined = published, quarantined
}
