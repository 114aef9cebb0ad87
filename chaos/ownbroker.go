package chaos

import (
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
)

// The faults of this file act on the harness's own RabbitMQ node only (gen.Setup.OwnBroker): a policy, a
// crash of the node, the permissions of a user of the run's own.

// queuePolicy is the name of the run's own queue-length policy; it matches the consumer's queue alone.
func (w *world) queuePolicy() string { return "chaos_length_" + w.db }

// queuePolicyFault applies gen.QueuePolicies[f.N] to the consumer's queue for f.Dur, then clears it, and,
// once the routers had time to finish what they held (--refusal-retry), replays in bg the records the
// policy's nacks made (quarantined since it was set, their reason a nack). It records the fault from
// before set_policy to after clear_policy returned.
func (w *world) queuePolicyFault(f gen.Step, bg *sync.WaitGroup) {
	from := time.Now()
	out, err := w.broker.TryCtl(time.Minute, "set_policy", "--apply-to", "queues", "--priority", "100",
		w.queuePolicy(), "^"+w.queue+"$", gen.QueuePolicies[f.N])
	note := ""
	if err != nil {
		note = fmt.Sprintf("set_policy: %v: %s", err, out)
	}
	time.Sleep(f.Dur)
	for i := 0; ; i++ {
		out, err := w.broker.TryCtl(time.Minute, "clear_policy", w.queuePolicy())
		if err == nil || strings.Contains(out, "not found") {
			break
		}
		if i == 4 {
			w.t.Errorf("the run's policy %s stays: %v: %s", w.queuePolicy(), err, out)
			note += fmt.Sprintf("; clear_policy: %v: %s", err, out)
			break
		}
		time.Sleep(time.Second)
	}
	w.rec.Event(check.Event{From: from, To: time.Now(), Kind: f.Kind, Note: note})
	bg.Add(1)
	go func() {
		defer bg.Done()
		time.Sleep(4 * time.Second)
		w.rec.Event(w.replayWhere(`quarantined_at >= $1 AND reason LIKE 'nacked by the broker%'`, from))
	}()
}

// brokerKill kills the node's VM (SIGKILL) and starts it again after f.Dur from the same data.
func (w *world) brokerKill(f gen.Step) {
	from, to, note := w.broker.Kill(f.Dur)
	w.rec.Event(check.Event{From: from, To: to, Kind: f.Kind, Note: note})
}

// routerUser is the user the routers connect as on the harness's own node (gen.Setup.OwnBroker);
// commands and the consumer stay guest.
func (w *world) routerUser() string { return "router_" + w.db }

// routerPermissions are the configure, write and read permissions docs/howto/secure.md#rabbitmq-users gives the
// router's user, adapted to the run's --exchange: its exchange, the alternate exchange and its queue, and
// write on the per-topic exchange of the mapped table (Setup.ExchangeByTopic: declared by the operator, so
// the router only publishes to it).
func (w *world) routerPermissions() (configure, write, read string) {
	own := "^" + regexp.QuoteMeta(w.exchange) + `(\.unroutable)?$`
	write = own
	if w.plan.Setup.ExchangeByTopic {
		write = "^(" + regexp.QuoteMeta(w.exchange) + `(\.unroutable)?|` + regexp.QuoteMeta(w.topicExchange()) + ")$"
	}
	return own, write, own
}

// addRouterUser creates routerUser with routerPermissions and makes it the routers' AMQP URL.
func (w *world) addRouterUser() error {
	// The password carries the payload token, so that a router logging it breaks logs-carry-no-payload.
	u, err := w.broker.AddUser(w.routerUser(), w.token+"-password")
	if err != nil {
		return err
	}
	configure, write, read := w.routerPermissions()
	if out, err := w.broker.TryCtl(time.Minute, "set_permissions", "-p", "/", w.routerUser(), configure, write, read); err != nil {
		return fmt.Errorf("set_permissions: %v: %s", err, out)
	}
	w.routerAMQPURL = u
	return nil
}

// permissionsFault takes away from the routers' user write on their exchange (f.N 0: they can declare
// everything and publish nowhere but the alternate exchange) or configure (1: they can declare nothing)
// for f.Dur, and closes its connections so that the change applies at once (a channel keeps the
// permissions it checked), then gives routerPermissions back.
func (w *world) permissionsFault(f gen.Step) {
	configure, write, read := w.routerPermissions()
	if f.N == 0 {
		write = "^" + regexp.QuoteMeta(w.exchange+".unroutable") + "$"
		if w.plan.Setup.ExchangeByTopic {
			write = "^(" + regexp.QuoteMeta(w.exchange+".unroutable") + "|" + regexp.QuoteMeta(w.topicExchange()) + ")$"
		}
	} else {
		configure = "^$"
	}
	from := time.Now()
	var notes []string
	if out, err := w.broker.TryCtl(time.Minute, "set_permissions", "-p", "/", w.routerUser(), configure, write, read); err != nil {
		notes = append(notes, fmt.Sprintf("revoke: %v: %s", err, out))
	}
	if out, err := w.broker.TryCtl(time.Minute, "close_all_user_connections", w.routerUser(), "chaos: permissions changed"); err != nil {
		notes = append(notes, fmt.Sprintf("close_all_user_connections: %v: %s", err, out))
	}
	time.Sleep(f.Dur)
	for i := 0; ; i++ {
		configure, write, read := w.routerPermissions()
		out, err := w.broker.TryCtl(time.Minute, "set_permissions", "-p", "/", w.routerUser(), configure, write, read)
		if err == nil {
			break
		}
		if i == 4 {
			w.t.Errorf("the routers' user keeps its revoked permissions: %v: %s", err, out)
			notes = append(notes, fmt.Sprintf("restore: %v: %s", err, out))
			break
		}
		time.Sleep(time.Second)
	}
	w.rec.Event(check.Event{From: from, To: time.Now(), Kind: f.Kind, Note: strings.Join(notes, "; ")})
}
