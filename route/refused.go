package route

import (
	"sync"
	"sync/atomic"
)

// maxRefused bounds the aggregates a refusals set remembers (8 bytes and a map entry each); past it a
// refusal is not remembered, and its aggregate keeps AggregateWindow in the next Router (as before the set).
const maxRefused = 1 << 16

// refusals is the set of aggregates (by aggregateHash) one of whose events the broker refused (a nack, a
// return, a channel close attributed to its publish) and none of whose events it confirmed since. The
// Dialer keeps it across the Routers it dials, which is across the caller's restarts: a Router lets such an
// aggregate have one unconfirmed event, not AggregateWindow, until one of its events is confirmed. So with
// AggregateWindow N a refusal that lasts does not make every retry write the N-1 later events of the
// aggregate again behind the refused one (each retry used to deliver them once more, out of order again):
// after the first refusal they wait behind it, and reach the queues once more when it is confirmed or the
// caller has given it up (quarantined). With AggregateWindow 1 it is not used. Safe for concurrent use;
// has and clear cost one atomic load while the set is empty.
type refusals struct {
	n    atomic.Int64
	mu   sync.RWMutex // read-held by has, which every Publish of every lane calls while the set is not empty
	aggs map[uint64]struct{}
}

// add remembers agg, unless maxRefused aggregates are remembered already.
func (s *refusals) add(agg uint64) {
	if s == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.aggs[agg]; ok || len(s.aggs) >= maxRefused {
		return
	}
	if s.aggs == nil {
		s.aggs = map[uint64]struct{}{}
	}
	s.aggs[agg] = struct{}{}
	s.n.Add(1)
}

// has reports whether agg is remembered.
func (s *refusals) has(agg uint64) bool {
	if s == nil || s.n.Load() == 0 {
		return false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	_, ok := s.aggs[agg]
	return ok
}

// clear forgets agg, one of whose events the broker confirmed.
func (s *refusals) clear(agg uint64) {
	if s == nil || s.n.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.aggs[agg]; ok {
		delete(s.aggs, agg)
		s.n.Add(-1)
	}
}

// len returns the number of aggregates remembered.
func (s *refusals) len() int {
	if s == nil {
		return 0
	}
	return int(s.n.Load())
}
