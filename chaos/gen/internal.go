package gen

import "math/rand/v2"

// OpInternal is a row of the mapped table whose topic names RabbitMQ's internal exchange
// amq.rabbitmq.trace (it exists in every vhost), on a setup whose topics name their exchange
// (Setup.InternalExchange): the router finds the exchange, and the broker closes the channel with 403
// "cannot publish to internal exchange" on its publish, every time. The router must take that for the
// event's refusal, retry it for --refusal-retry and quarantine it with the broker's words, and the stream
// go on (issue 36, finding 4: before, 44 restarts in 11 minutes and every later row waiting).
const OpInternal Kind = "internal-exchange"

// InternalExchange is the exchange an OpInternal row's topic names.
const InternalExchange = "amq.rabbitmq.trace"

// addInternalExchange gives half of the seeds whose mapped table routes to per-topic exchanges on the shared
// broker (Setup.ExchangeByTopic, not Setup.OwnBroker, whose least permissions would refuse the write before
// the exchange does) one or two OpInternal rows in place of single-row transactions, and sets
// Setup.InternalExchange: the mapping's topic is then the exchange's whole name (route.topic.replacement
// ${routedByValue}, the other rows' aggregate type the per-topic exchange's name). From a generator of its
// own, last, so that no other choice of a plan changes.
func addInternalExchange(p *Plan, seed int64) {
	r := rand.New(rand.NewPCG(uint64(seed), 0x1e7a))
	if !p.Setup.ExchangeByTopic || p.Setup.OwnBroker || r.IntN(2) != 0 {
		return
	}
	var singles []*Step
	for w := range p.Ops {
		for i := range p.Ops[w] {
			if p.Ops[w][i].Kind == OpSingle {
				singles = append(singles, &p.Ops[w][i])
			}
		}
	}
	if len(singles) == 0 {
		return
	}
	p.Setup.InternalExchange = true
	for range min(1+r.IntN(2), len(singles)) {
		op := singles[r.IntN(len(singles))]
		op.Kind, op.N = OpInternal, 1
	}
}
