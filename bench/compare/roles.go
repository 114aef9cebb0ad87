package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
)

// payload is the event body: JSON of exactly size bytes in the form PostgreSQL prints a jsonb value
// (so the router's body, which is the payload column's text, is the same bytes), carrying the send time.
func payload(size int, sent time.Time) string {
	ns := sent.UnixNano()
	pad := size - len(fmt.Sprintf(`{"pad": "", "sent_ns": %d}`, ns))
	return fmt.Sprintf(`{"pad": "%s", "sent_ns": %d}`, strings.Repeat("x", max(pad, 0)), ns)
}

// sentNS reads the send time back from a body; 0 if it has none.
func sentNS(body []byte) int64 {
	i := bytes.Index(body, []byte(`"sent_ns":`))
	if i < 0 {
		return 0
	}
	rest := bytes.TrimLeft(body[i+len(`"sent_ns":`):], " ")
	j := 0
	for j < len(rest) && rest[j] >= '0' && rest[j] <= '9' {
		j++
	}
	ns, _ := strconv.ParseInt(string(rest[:j]), 10, 64)
	return ns
}

// consumer counts the deliveries on one queue and records, for each, when it arrived and its
// insert-to-consumer latency (arrival minus the send time in the body).
type consumer struct {
	conn *amqp.Connection
	lost chan *amqp.Error // the connection closed (e.g. the broker restarted): the run cannot finish
	mu   sync.Mutex
	recv []int64 // arrival, unix ns
	lat  []int64 // ns

	// The hot-burst mode's trickle (routing keys trickle.*), apart from the rest: their latencies, and
	// the rest's count and last arrival.
	trickleLat []int64
	others     int
	lastOther  int64
}

// results copies the arrival times, in arrival order, and the latencies, sorted.
func (c *consumer) results() (recv, lat []int64) {
	c.mu.Lock()
	recv = append([]int64(nil), c.recv...)
	lat = append([]int64(nil), c.lat...)
	c.mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return recv, lat
}

func consume(url, queue string, expect int) (*consumer, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, fmt.Errorf("consumer: connect to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Qos(2000, 0, false)
	}
	var msgs <-chan amqp.Delivery
	if err == nil {
		msgs, err = ch.Consume(queue, "", true, false, false, false, nil)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("consumer: %w", err)
	}
	c := &consumer{conn: conn, lost: conn.NotifyClose(make(chan *amqp.Error, 1)), recv: make([]int64, 0, expect), lat: make([]int64, 0, expect)}
	go func() {
		for m := range msgs {
			now := time.Now().UnixNano()
			c.mu.Lock()
			c.recv = append(c.recv, now)
			c.lat = append(c.lat, now-sentNS(m.Body))
			if strings.HasPrefix(m.RoutingKey, "trickle.") {
				c.trickleLat = append(c.trickleLat, now-sentNS(m.Body))
			} else {
				c.others++
				c.lastOther = now
			}
			c.mu.Unlock()
		}
	}()
	return c, nil
}

func (c *consumer) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.recv)
}

// trickle returns the trickle's latencies, sorted, and the last arrival of the other messages.
func (c *consumer) trickle() (lat []int64, lastOther int64) {
	c.mu.Lock()
	lat = append([]int64(nil), c.trickleLat...)
	lastOther = c.lastOther
	c.mu.Unlock()
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	return lat, lastOther
}

// waitOthers waits until n messages other than the trickle's arrived.
func (c *consumer) waitOthers(n int, timeout time.Duration, what string) error {
	deadline := time.Now().Add(timeout)
	for {
		c.mu.Lock()
		got := c.others
		c.mu.Unlock()
		if got >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d events reached the consumer within %v (raise -timeout on a slow machine)", what, got, n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// wait waits until n messages arrived, or fails naming how many did.
func (c *consumer) wait(n int, timeout time.Duration, what string) error {
	deadline := time.Now().Add(timeout)
	for c.count() < n {
		select {
		case err := <-c.lost:
			return fmt.Errorf("%s: the consumer lost its RabbitMQ connection after %d of %d events (%v): was the broker restarted? Run again", what, c.count(), n, err)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d of %d events reached the consumer within %v (raise -timeout on a slow machine)", what, c.count(), n, timeout)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil
}

// load inserts n outbox rows, each in its own transaction, over writers connections. With rate > 0,
// row i commits no earlier than start + i/rate (a writer that falls behind does not sleep until it has
// caught up); with rate 0 as fast as PostgreSQL takes them. The send time in each payload is taken just
// before its INSERT. It returns the time from the first INSERT to the last commit.
func load(ctx context.Context, url string, n, rate, writers, size int) (time.Duration, error) {
	conns := make([]*pgx.Conn, writers)
	for w := range conns {
		c, err := pgx.Connect(ctx, url)
		if err != nil {
			return 0, fmt.Errorf("load generator: %w", err)
		}
		defer c.Close(context.Background())
		conns[w] = c
	}
	start := time.Now()
	errs := make(chan error, writers)
	for w := range conns {
		go func(w int) {
			for i := w; i < n; i += writers {
				if rate > 0 {
					time.Sleep(time.Until(start.Add(time.Duration(int64(i) * int64(time.Second) / int64(rate)))))
				}
				_, err := conns[w].Exec(ctx, `INSERT INTO outbox (id, aggregate_type, aggregate_id, aggregate_version, event_type, payload)
					VALUES (gen_random_uuid(), 'order', $1, 1, 'created', $2::jsonb)`, "agg-"+strconv.Itoa(i), payload(size, time.Now()))
				if err != nil {
					errs <- fmt.Errorf("load generator: insert: %w", err)
					return
				}
			}
			errs <- nil
		}(w)
	}
	var first error
	for range conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return time.Since(start), first
}

// untilSignalled returns a context cancelled by SIGTERM or SIGINT, for the publisher roles.
func untilSignalled() context.Context {
	ctx, _ := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	return ctx
}

func publishChannel(url string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err == nil {
		err = ch.Confirm(false)
	}
	if err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, ch, nil
}

func message(body []byte) amqp.Publishing {
	return amqp.Publishing{ContentType: "application/json", DeliveryMode: amqp.Persistent, Body: body}
}

// likeRouter gives msg the properties and headers the router sets (route/message.go), with values of
// the same shape, so that the ceiling can be measured with the router's header frame too.
func likeRouter(msg *amqp.Publishing, i int) {
	msg.MessageId = fmt.Sprintf("0190a5c8-3b1e-7c6d-9f00-%012d", i)
	msg.Type = "created"
	msg.Timestamp = time.Now()
	msg.Headers = amqp.Table{"aggregate_type": "order", "aggregate_id": "agg-" + strconv.Itoa(i),
		"aggregate_version": int64(1), "schema_version": int32(1), "commit_lsn": fmt.Sprintf("0/%X", 0x1A2B3C4D+i*700)}
}

// runBare is the ceiling: one channel with confirms and up to 1,000 messages in flight publishing n
// messages of size bytes (at rate per second, or as fast as the broker confirms with rate 0), then
// idling until signalled so that the parent can read its /proc entries.
func runBare(url, exchange string, n, rate, size int, headers bool) error {
	ctx := untilSignalled()
	conn, ch, err := publishChannel(url)
	if err != nil {
		return err
	}
	defer conn.Close()
	inflight := make(chan *amqp.DeferredConfirmation, 1000)
	failed := make(chan error, 1)
	go func() {
		for dc := range inflight {
			if ok, err := dc.WaitContext(ctx); err != nil || !ok {
				failed <- fmt.Errorf("bare publisher: message %d not confirmed (ack %v, %v)", dc.DeliveryTag, ok, err)
				return
			}
		}
		close(failed)
	}()
	start := time.Now()
	for i := 0; i < n; i++ {
		if rate > 0 {
			time.Sleep(time.Until(start.Add(time.Duration(int64(i) * int64(time.Second) / int64(rate)))))
		}
		msg := message([]byte(payload(size, time.Now())))
		if headers {
			likeRouter(&msg, i)
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "order.created", false, false, msg)
		if err != nil {
			return fmt.Errorf("bare publisher: publish: %w", err)
		}
		inflight <- dc
	}
	close(inflight)
	if err := <-failed; err != nil {
		return err
	}
	<-ctx.Done()
	return nil
}

// runPoll is the reference polling publisher: one worker that locks up to 100 unpublished rows with
// FOR UPDATE SKIP LOCKED, publishes them with confirms pipelined, marks them published_at = now() and
// commits; it sleeps 10 ms when it found nothing.
func runPoll(pgURL, amqpURL, exchange string, headers bool) error {
	ctx := untilSignalled()
	db, err := pgx.Connect(ctx, pgURL)
	if err != nil {
		return fmt.Errorf("polling publisher: %w", err)
	}
	defer db.Close(context.Background())
	conn, ch, err := publishChannel(amqpURL)
	if err != nil {
		return fmt.Errorf("polling publisher: %w", err)
	}
	defer conn.Close()
	p := &poller{db: db, ch: ch, exchange: exchange, headers: headers}
	for ctx.Err() == nil {
		n, err := p.once(ctx)
		if ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return fmt.Errorf("polling publisher: %w", err)
		}
		if n == 0 {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return nil
}

type poller struct {
	db       *pgx.Conn
	ch       *amqp.Channel
	exchange string
	headers  bool // the router's headers and properties on every message (-poll-headers)
	sent     int
	ids      []string
	confirms []*amqp.DeferredConfirmation
}

// once publishes one batch in one transaction and returns its size.
func (p *poller) once(ctx context.Context) (int, error) {
	tx, err := p.db.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	rows, err := tx.Query(ctx, `SELECT id::text, payload::text FROM outbox WHERE published_at IS NULL
		ORDER BY occurred_at FOR UPDATE SKIP LOCKED LIMIT 100`)
	if err != nil {
		return 0, err
	}
	p.ids, p.confirms = p.ids[:0], p.confirms[:0]
	for rows.Next() {
		var id, body string
		if err := rows.Scan(&id, &body); err != nil {
			rows.Close()
			return 0, err
		}
		msg := message([]byte(body))
		if p.headers {
			likeRouter(&msg, p.sent)
		}
		p.sent++
		dc, err := p.ch.PublishWithDeferredConfirmWithContext(ctx, p.exchange, "order.created", false, false, msg)
		if err != nil {
			rows.Close()
			return 0, fmt.Errorf("publish: %w", err)
		}
		p.ids, p.confirms = append(p.ids, id), append(p.confirms, dc)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return 0, err
	}
	for _, dc := range p.confirms {
		if ok, err := dc.WaitContext(ctx); err != nil || !ok {
			return 0, fmt.Errorf("message not confirmed (ack %v, %v)", ok, err)
		}
	}
	if len(p.ids) > 0 {
		if _, err := tx.Exec(ctx, `UPDATE outbox SET published_at = now() WHERE id = ANY($1::uuid[])`, p.ids); err != nil {
			return 0, err
		}
	}
	return len(p.ids), tx.Commit(ctx)
}
