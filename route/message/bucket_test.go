package message

import (
	"fmt"
	"testing"

	"github.com/cdc-router/cdc-router/route/message/messagetest"
)

// The bucket is a documented function of the aggregate: these values were computed independently (Python,
// from the definition in Bucket's comment), so a change to the function, which would move aggregates
// between the partitions of running consumer groups, fails here.
func TestBucketIsTheDocumentedFunction(t *testing.T) {
	for _, c := range []struct {
		typ, id string
		want    int32
	}{
		{"order", "42", 34}, {"order", "order-0", 40}, {"customer", "42", 62}, {"", "", 46},
		{"Order", "o-1", 34}, {"net.chrisrichardson.ftgo.Order", "1001", 35}, {"Order", "", 51},
	} {
		if got := Bucket(c.typ, c.id); got != c.want {
			t.Errorf("Bucket(%q, %q) = %d, want %d", c.typ, c.id, got, c.want)
		}
	}
	// The separator keeps the type and the id apart.
	if Bucket("ab", "c") == Bucket("a", "bc") && Bucket("ab", "") == Bucket("a", "b") {
		t.Errorf("the zero byte does not separate type and id")
	}
}

// Aggregates spread over the buckets evenly enough that partitions get similar shares: 20,000 ids of two
// shapes (sequential names and UUID-like text) put between half and twice the mean in every bucket, and
// every partition of 2 to 16 gets within 15 % of its share, which is its count of buckets over 64 (when N
// does not divide 64, some partitions hold one bucket more than others).
func TestBucketSpreadsAggregates(t *testing.T) {
	for _, shape := range []string{"order-%d", "0190f3c2-7a1e-7c3b-9a51-%012x"} {
		var n [Buckets]int
		const keys = 20000
		for i := range keys {
			b := Bucket("order", fmt.Sprintf(shape, i))
			if b < 0 || b >= Buckets {
				t.Fatalf("bucket %d out of range", b)
			}
			n[b]++
		}
		mean := keys / Buckets
		for b, c := range n {
			if c < mean/2 || c > 2*mean {
				t.Errorf("%s: bucket %d holds %d of %d keys (mean %d)", shape, b, c, keys, mean)
			}
		}
		for parts := 2; parts <= 16; parts++ {
			share := make([]int, parts)
			for b, c := range n {
				share[b%parts] += c
			}
			for i, c := range share {
				buckets := (Buckets - i + parts - 1) / parts // the b < 64 with b mod parts = i
				if want := float64(keys) * float64(buckets) / Buckets; float64(c) < 0.85*want || float64(c) > 1.15*want {
					t.Errorf("%s: partition %d of %d holds %d keys, want about %.0f", shape, i, parts, c, want)
				}
			}
		}
	}
}

// Every message carries its aggregate's bucket, native and mapped, and a user header of that name cannot
// move an event to another partition.
func TestMessagesCarryTheBucket(t *testing.T) {
	ev := messagetest.NativeEvent()
	ev.Headers = []byte(`{"aggregate_bucket": 3}`)
	_, msg, err := Build(ev)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Headers[HeaderAggregateBucket]; got != Bucket("order", "42") {
		t.Errorf("native: aggregate_bucket = %#v, want %d", got, Bucket("order", "42"))
	}
	m := messagetest.MappedEvent()
	m.Mapped.JSONHeaders = []byte(`{"aggregate_bucket": 3}`)
	_, msg, err = Build(m)
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Headers[HeaderAggregateBucket]; got != Bucket("Order", "o-1") {
		t.Errorf("mapped: aggregate_bucket = %#v, want %d", got, Bucket("Order", "o-1"))
	}
	m.AggregateID = "" // a mapped row without a key: the bucket of its routing value alone
	if _, msg, _ = Build(m); msg.Headers[HeaderAggregateBucket] != Bucket("Order", "") {
		t.Errorf("mapped without a key: aggregate_bucket = %#v", msg.Headers[HeaderAggregateBucket])
	}
}
