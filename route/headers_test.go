package route

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/route/message/messagetest"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/route/message"
)

// headerGen produces random headers columns (JSON objects as text) of the kinds users write and of the
// kinds that break brokers: reserved names and their case variants, names of 255 and 256 bytes, many
// entries, nested values, long strings, numbers beyond int64 and float64.
type headerGen struct {
	rng   *rand.Rand
	short bool // no long string values (for objects of thousands of entries)
}

func (g headerGen) name() string {
	switch g.rng.IntN(8) {
	case 0:
		special := []string{"CC", "BCC", "cc", "Cc", "bcc", "Bcc", "x-death", "X-Death", "x-first-death-queue",
			"x-last-death-reason", "x-amqp-1.0-properties", "x-amqp-1.0-app-properties", "x-delay", "x-match",
			"x-received-from", "x-stream-filter-value", "x-deliver-at", "x-backfill", "aggregate_id", "commit_lsn", ""}
		return special[g.rng.IntN(len(special))]
	case 1:
		return strings.Repeat("n", 250+g.rng.IntN(10)) // around the 255-byte limit
	case 2:
		return "ключ-" + g.str(g.rng.IntN(20)) + "\u00e9\t\"\\"
	default:
		return g.str(1 + g.rng.IntN(30))
	}
}

func (g headerGen) str(n int) string {
	const alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.:/ "
	b := make([]byte, n)
	for i := range b {
		b[i] = alphabet[g.rng.IntN(len(alphabet))]
	}
	return string(b)
}

func (g headerGen) value(depth int) string {
	switch g.rng.IntN(12) {
	case 0:
		return "null"
	case 1:
		return []string{"true", "false"}[g.rng.IntN(2)]
	case 2:
		return fmt.Sprint(int64(g.rng.Uint64()))
	case 3:
		return []string{"18446744073709551616", "-9223372036854775809", "1e400", "-1e400", "1.5e300", "-0.0", "0.1", "5e-324"}[g.rng.IntN(8)]
	case 4:
		return fmt.Sprint(g.rng.NormFloat64() * 1e6)
	case 5:
		if depth < 3 {
			var b strings.Builder
			b.WriteString("[")
			for i := range g.rng.IntN(5) {
				if i > 0 {
					b.WriteString(",")
				}
				b.WriteString(g.value(depth + 1))
			}
			return b.String() + "]"
		}
		return `"leaf"`
	case 6:
		if depth < 3 {
			return g.object(g.rng.IntN(5), depth+1)
		}
		return `{}`
	case 7:
		if g.short {
			return `"short"`
		}
		s, _ := json.Marshal(g.str(1000 + g.rng.IntN(60000)))
		return string(s)
	default:
		s, _ := json.Marshal(g.str(g.rng.IntN(40)) + []string{"", "é", "\n", "\u2028", "\\u0000"}[g.rng.IntN(5)])
		return string(s)
	}
}

func (g headerGen) object(n, depth int) string {
	var b strings.Builder
	b.WriteString("{")
	for i := range n {
		if i > 0 {
			b.WriteString(",")
		}
		k, _ := json.Marshal(g.name())
		b.Write(k)
		b.WriteString(":")
		b.WriteString(g.value(depth))
	}
	return b.String() + "}"
}

// headers returns one headers column: mostly a few entries, sometimes thousands, sometimes padded to
// within a byte of the frame_max boundary for ev.
func (g headerGen) headers(ev cdc.Event, frameMax int) []byte {
	switch g.rng.IntN(10) {
	case 0:
		many := headerGen{rng: g.rng, short: true}
		return []byte(many.object(1000+g.rng.IntN(9000), 1))
	case 1, 2:
		obj := g.object(g.rng.IntN(4), 1)
		ev.Headers = []byte(obj[:len(obj)-1] + sep(obj) + `"pad":""}`)
		_, msg, err := message.Build(ev)
		if err != nil {
			return ev.Headers // refused statically anyway
		}
		n, _, _ := message.ContentHeaderSize(msg)
		pad := frameMax - message.FrameOverhead - n + g.rng.IntN(3) - 1 // one byte under, at, or one byte over
		return []byte(obj[:len(obj)-1] + sep(obj) + `"pad":"` + strings.Repeat("p", max(pad, 0)) + `"}`)
	default:
		return []byte(g.object(g.rng.IntN(12), 1))
	}
}

func sep(obj string) string {
	if obj == "{}" {
		return ""
	}
	return ","
}

// TestRandomHeadersBrokerAcceptsOrMappingRefuses publishes 300 seeded random headers columns through a
// Router to the real broker, one at a time: each is either refused by the mapping with ErrInvalidEvent
// (the Router goes on) or confirmed positively, and the channels and the connection stay open throughout.
func TestRandomHeadersBrokerAcceptsOrMappingRefuses(t *testing.T) {
	const cases = 300
	b := newBroker(t)
	cfg := b.config("")
	cfg.Lanes = 2
	r := b.dial(cfg)
	b.queue("#", nil) // a transient queue: no fsync per confirm
	g := headerGen{rng: rand.New(rand.NewPCG(7, 2026))}
	c := newCounter()
	var accepted, refused, boundary, atLimit int
	reasons := map[string]int{}
	for i := range cases {
		ev := messagetest.NativeEvent()
		ev.ID = fmt.Sprintf("random-%03d", i)
		ev.AggregateID = fmt.Sprint(i % 17)
		ev.Headers = g.headers(ev, r.frameMax)
		if bytes.Contains(ev.Headers, []byte(`"pad":"`)) {
			boundary++
		}
		err := r.Publish(context.Background(), ev, c.done(ev.ID))
		if err != nil {
			if !errors.Is(err, ErrInvalidEvent) {
				t.Fatalf("case %d: Publish = %v, want nil or ErrInvalidEvent (headers %.200s)", i, err, ev.Headers)
			}
			if r.Err() != nil {
				t.Fatalf("case %d: a refused event failed the Router: %v", i, r.Err())
			}
			refused++
			reasons[reasonClass(err)]++
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		err = r.Drain(ctx)
		cancel()
		if err != nil || c.count(ev.ID) != 1 {
			t.Fatalf("case %d: the mapping let through headers the broker did not confirm (Drain: %v): %.300s", i, err, ev.Headers)
		}
		accepted++
		if _, msg, _ := message.Build(ev); mustFrame(t, msg, r.frameMax) == r.frameMax {
			atLimit++
		}
	}
	t.Logf("%d random headers columns (%d padded to within a byte of frame_max %d): %d confirmed by the broker (%d exactly at frame_max), "+
		"%d refused by the mapping %v", cases, boundary, r.frameMax, accepted, atLimit, refused, reasons)
	if accepted < cases/3 || refused < cases/10 || atLimit == 0 {
		t.Errorf("the generator is lopsided: %d accepted (%d at the limit), %d refused", accepted, atLimit, refused)
	}
}

func mustFrame(t *testing.T, msg amqp.Publishing, frameMax int) int {
	t.Helper()
	n, err := message.CheckFrame(msg, frameMax)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// reasonClass names the kind of a refusal, for the test's summary.
func reasonClass(err error) string {
	s := err.Error()
	for _, k := range []string{"frame_max", "reserved", "255", "JSON"} {
		if strings.Contains(s, k) {
			return k
		}
	}
	return s
}
