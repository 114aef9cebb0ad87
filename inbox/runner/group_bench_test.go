//go:build groupbench

package runner_test

// The consumer-group measurements of docs/consumer-groups.md (not in CI: make does not run the tag):
//
//	go test -tags groupbench -run TestBenchConsumerGroups -v -count=1 ./inbox/runner/

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// benchResult is one configuration's figures.
type benchResult struct {
	name        string
	backlogRate float64 // events/s draining a backlog
	p50, p99    time.Duration
	pause       time.Duration // the longest publish-to-applied of the events published after the kill
	parked      int64
}

// benchLab times every event from its publish to its application.
type benchLab struct {
	*groupLab
	mu        sync.Mutex
	published map[string]time.Time
	latency   map[string]time.Duration
}

// onOutcome times an event at its first Applied or Duplicate outcome: an instance stopped past its drain
// timeout can commit an event and report an error (its context cancelled), and the survivor then finds
// it a duplicate.
func (l *benchLab) onOutcome(ev inbox.Event, res inbox.Result, err error) {
	if err != nil {
		return
	}
	now := time.Now()
	switch res.Outcome {
	case inbox.Parked:
		l.parked.Add(1)
		return
	case inbox.Applied, inbox.Duplicate:
	default:
		return
	}
	l.mu.Lock()
	if at, ok := l.published[ev.ID]; ok {
		if _, seen := l.latency[ev.ID]; !seen {
			l.latency[ev.ID] = now.Sub(at)
		}
	}
	l.mu.Unlock()
}

// appliedInbox is the count of events the inbox holds as applied.
func (l *benchLab) appliedInbox() int64 {
	return l.Count(`SELECT count(*) FROM inbox.inbox WHERE status = 'applied'`)
}

// publishPaced publishes events at rate per second, recording each one's publish time.
func (l *benchLab) publishPaced(events []inbox.Event, rate int) {
	tick := time.Second / time.Duration(rate) * 10
	for i := 0; i < len(events); i += 10 {
		start := time.Now()
		batch := events[i:min(i+10, len(events))]
		l.mu.Lock()
		for _, ev := range batch {
			l.published[ev.ID] = start
		}
		l.mu.Unlock()
		l.publishBucketed(batch)
		time.Sleep(tick - time.Since(start))
	}
}

// A handler of one database write per event: the projection row's upsert (the lab's, without its log).
func oneWrite(ctx context.Context, tx pgx.Tx, ev inbox.Event) error {
	_, err := tx.Exec(ctx, `INSERT INTO projection AS p (id, amount, version) VALUES ($1, 1, $2)
		ON CONFLICT (id) DO UPDATE SET amount = p.amount + 1, version = EXCLUDED.version`, ev.AggregateID, ev.AggregateVersion)
	return err
}

// run measures one configuration: instances runners of cfg drain a backlog of 4,000 events of 200
// aggregates, then take 3,000 paced at 300/s, and one instance (through a proxy) dies a third of the way
// through, when there is more than one.
func benchConfig(t *testing.T, name string, instances int, cfg func(l *benchLab) runner.Config) benchResult {
	gl := newGroupLab(t)
	l := &benchLab{groupLab: gl, published: map[string]time.Time{}, latency: map[string]time.Duration{}}
	c := cfg(l)
	c.OnOutcome = l.onOutcome
	c.Registerer = nil
	proxy := testenv.NewProxy(t, testenv.AMQPAddr(t))
	var stops []func() error
	startAll := func() {
		for i := range instances {
			ci := c
			if i == instances-1 && instances > 1 {
				ci.URLs = []string{"amqp://guest:guest@" + proxy.Addr + "/"}
				ci.DrainTimeout = time.Millisecond
			}
			p, err := inbox.New(l.pool, oneWrite, inbox.Config{Consumer: l.consumer}, l.logger())
			if err != nil {
				t.Fatal(err)
			}
			stops = append(stops, l.start(p, ci))
		}
	}
	// The topology first (a runner declares it), then the backlog, then the timed drain.
	startAll()
	time.Sleep(2 * time.Second)
	for _, s := range stops {
		s()
	}
	stops = nil
	backlog := oneDigitStream("b", 200, 20)
	l.publishBucketed(backlog)
	start := time.Now()
	startAll()
	l.waitFor("the backlog applied", 5*time.Minute, func() bool { return l.appliedInbox() >= int64(len(backlog)) })
	r := benchResult{name: name, backlogRate: float64(len(backlog)) / time.Since(start).Seconds()}

	paced := oneDigitStream("p", 200, 15)
	var killedAt time.Time
	done := make(chan struct{})
	go func() {
		defer close(done)
		l.publishPaced(paced, 300)
	}()
	if instances > 1 {
		time.Sleep(3 * time.Second)
		killedAt = time.Now()
		proxy.Cut() // the connection dies; the instance stops before it can reconnect
		go stops[len(stops)-1]()
	}
	<-done
	l.waitFor("the paced events applied", 2*time.Minute, func() bool { return l.appliedInbox() >= int64(len(backlog)+len(paced)) })
	var lat []time.Duration
	l.mu.Lock()
	for _, ev := range paced {
		d := l.latency[ev.ID]
		lat = append(lat, d)
		if !killedAt.IsZero() && !l.published[ev.ID].Before(killedAt) && d > r.pause {
			r.pause = d
		}
	}
	l.mu.Unlock()
	slices.Sort(lat)
	r.p50, r.p99 = lat[len(lat)/2], lat[len(lat)*99/100]
	r.parked = l.parked.Load()
	return r
}

func TestBenchConsumerGroups(t *testing.T) {
	var results []benchResult
	plain := func(sac bool) func(l *benchLab) runner.Config {
		return func(l *benchLab) runner.Config {
			c := l.config(4)
			c.Queue = l.queue + "-plain"
			c.SingleActiveConsumer = sac
			t.Cleanup(func() { deleteQueue(t, c.Queue) })
			return c
		}
	}
	group := func(n int) func(l *benchLab) runner.Config {
		return func(l *benchLab) runner.Config { c := l.groupConfig(n); c.RebalanceInterval = time.Second; return c }
	}
	for _, c := range []struct {
		name      string
		instances int
		cfg       func(l *benchLab) runner.Config
	}{
		{"shared queue, 2 instances", 2, plain(false)},
		{"single active consumer, 2 instances", 2, plain(true)},
		{"group of 4 partitions, 1 instance", 1, group(4)},
		{"group of 4 partitions, 2 instances", 2, group(4)},
		{"group of 4 partitions, 4 instances", 4, group(4)},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := benchConfig(t, c.name, c.instances, c.cfg)
			results = append(results, r)
			summary(t, "%s: backlog %.0f events/s; paced 300/s: p50 %v p99 %v; pause after a death %v; parked %d",
				r.name, r.backlogRate, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond),
				r.pause.Round(time.Millisecond), r.parked)
		})
	}
	for _, r := range results {
		fmt.Printf("| %s | %.0f | %v | %v | %v | %d |\n", r.name, r.backlogRate, r.p50.Round(time.Millisecond),
			r.p99.Round(time.Millisecond), r.pause.Round(time.Millisecond), r.parked)
	}
}
