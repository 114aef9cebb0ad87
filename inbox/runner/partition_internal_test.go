package runner

import (
	"slices"
	"testing"
	"time"
)

// Every bucket belongs to exactly one partition, the one partitionOf names, for every N from 1 to 64; and
// for every count of members the partitions are dealt out exactly once, evenly.
func TestPartitionBucketsAndAssignment(t *testing.T) {
	for n := 1; n <= buckets; n++ {
		seen := map[int32]int{}
		for i := range n {
			bs := partitionBuckets(i, n)
			if len(bs) < buckets/n || len(bs) > (buckets+n-1)/n {
				t.Errorf("N=%d: partition %d has %d buckets, want %d or %d", n, i, len(bs), buckets/n, (buckets+n-1)/n)
			}
			for _, b := range bs {
				seen[b]++
				if partitionOf(b, n) != i {
					t.Errorf("N=%d: bucket %d bound to partition %d, partitionOf says %d", n, b, i, partitionOf(b, n))
				}
			}
		}
		for b := int32(0); b < buckets; b++ {
			if seen[b] != 1 {
				t.Errorf("N=%d: bucket %d is bound to %d partitions, want 1", n, b, seen[b])
			}
		}
		for m := 1; m <= n+2; m++ {
			var all []int
			for r := range m {
				ps := assigned(r, m, n)
				if len(ps) < n/m || len(ps) > (n+m-1)/m {
					t.Errorf("N=%d M=%d: member %d gets %d partitions", n, m, r, len(ps))
				}
				all = append(all, ps...)
			}
			slices.Sort(all)
			if len(all) != n || len(slices.Compact(all)) != n {
				t.Errorf("N=%d M=%d: partitions dealt %v", n, m, all)
			}
		}
	}
}

func TestPartitionNamesAndValidation(t *testing.T) {
	c := Config{URLs: []string{"amqp://localhost/"}, Queue: "orders", Bindings: []string{"order.#"}, Partitions: 4}.Defaults()
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.partitionExchange() != "orders.partitions-4" || c.PartitionQueue(3) != "orders.3-of-4" ||
		c.memberQueue(0) != "orders.partitions-4.member-0" || c.RebalanceInterval != time.Second {
		t.Errorf("names %q %q %q, rebalance %v", c.partitionExchange(), c.PartitionQueue(3), c.memberQueue(0), c.RebalanceInterval)
	}
	for _, bad := range []Config{
		{Partitions: 65}, {Partitions: -1}, {Partitions: 2, RebalanceInterval: -time.Second},
		{Partitions: 2, Queue: string(make([]byte, 240))},
	} {
		b := c
		b.Partitions, b.RebalanceInterval = bad.Partitions, bad.RebalanceInterval
		if bad.Queue != "" {
			b.Queue = bad.Queue
		}
		if err := b.Validate(); err == nil {
			t.Errorf("Partitions %d RebalanceInterval %v queue of %d bytes: accepted", bad.Partitions, bad.RebalanceInterval, len(b.Queue))
		}
	}
}
