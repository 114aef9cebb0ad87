package message

import "github.com/cdc-router/cdc-router/internal/cdc"

// HeaderAggregateBucket is the aggregate's bucket (int32, 0 to Buckets-1), set on every message, native and
// mapped: the stable share of the aggregates a partitioned consumer group routes on (package inbox/runner,
// Config.Partitions, binds partition i of N to the buckets b with b mod N = i through a headers exchange).
// Every event of one aggregate carries the same bucket, so it lands in one partition, in order.
const HeaderAggregateBucket = "aggregate_bucket"

// Buckets is how many buckets there are. It is part of the message format: consumers bind to bucket
// numbers, so it never changes (a change would send an aggregate's later events to another partition).
const Buckets = 64

// Bucket is the bucket of the aggregate (aggregateType, aggregateID): the 64-bit FNV-1a hash of
// aggregate_type, one zero byte and aggregate_id, as UTF-8 bytes (the zero byte cannot occur in PostgreSQL
// text, so two keys never run together), mixed by MurmurHash3's 64-bit finalizer (FNV-1a alone leaves the
// last bytes of a key out of its top bits: ids that differ in their last digit crowded a few buckets),
// and its top 6 bits. For a mapped table aggregateType is the routing value (route.by.field) and
// aggregateID the key column, empty when the row has none. Any language computes it the same way: FNV-1a
// (offset basis 14695981039346656037, prime 1099511628211); then h ^= h >> 33; h *= 0xff51afd7ed558ccd;
// h ^= h >> 33; h *= 0xc4ceb9fe1a85ec53; h ^= h >> 33; and the bucket is h >> 58.
func Bucket(aggregateType, aggregateID string) int32 {
	const offset, prime = 14695981039346656037, 1099511628211
	h := uint64(offset)
	for i := 0; i < len(aggregateType); i++ {
		h = (h ^ uint64(aggregateType[i])) * prime
	}
	h *= prime // the separator: h ^ 0 is h
	for i := 0; i < len(aggregateID); i++ {
		h = (h ^ uint64(aggregateID[i])) * prime
	}
	h ^= h >> 33
	h *= 0xff51afd7ed558ccd
	h ^= h >> 33
	h *= 0xc4ceb9fe1a85ec53
	h ^= h >> 33
	return int32(h >> 58)
}

// eventBucket is Bucket of the event's aggregate.
func eventBucket(ev cdc.Event) int32 { return Bucket(ev.AggregateType, ev.AggregateID) }
