package runner_test

import (
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// declareLikeRouter declares exchange as cdc-router does (route/topology.go): its alternate exchange
// (durable fanout) with a queue of the same name, then the exchange, durable topic, with the
// alternate-exchange argument.
func declareLikeRouter(t *testing.T, ch *amqp.Channel, exchange, ae string) error {
	t.Helper()
	if err := ch.ExchangeDeclare(ae, amqp.ExchangeFanout, true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(ae, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.QueueBind(ae, "", ae, false, nil); err != nil {
		return err
	}
	return ch.ExchangeDeclare(exchange, amqp.ExchangeTopic, true, false, false, false,
		amqp.Table{"alternate-exchange": ae})
}

// A runner started before the router has declared its exchange waits for it, logging that it waits,
// without declaring it; once the router has declared it, the runner declares its durable quorum queue, binds
// it and applies the events; the router's declaration is undisturbed (declaring it again with the
// router's arguments still succeeds).
func TestRunnerWaitsForTheRoutersExchange(t *testing.T) {
	l := newRunnerLab(t)
	exchange := testenv.Name(t)
	ae := exchange + "_unroutable"
	queue := testenv.Name(t)
	t.Cleanup(func() {
		deleteQueue(t, queue)
		deleteQueue(t, ae)
		if c, err := amqp.Dial(testenv.AMQPURL(t)); err == nil {
			if ch, err := c.Channel(); err == nil {
				ch.ExchangeDelete(exchange, false, false)
				ch.ExchangeDelete(ae, false, false)
			}
			c.Close()
		}
	})
	cfg := l.config(2)
	cfg.Exchange, cfg.Queue, cfg.ExchangeWaitLog = exchange, queue, 300*time.Millisecond
	cfg.Quorum = true
	stop := l.start(l.processor(inbox.Config{}), cfg)

	l.waitFor("the runner logs that it waits", 10*time.Second, func() bool {
		return l.logs.contains("waiting for cdc-router to declare the exchange")
	})
	time.Sleep(time.Second)
	check := l.Channel()
	err := check.ExchangeDeclarePassive(exchange, amqp.ExchangeTopic, true, false, false, false, nil)
	var amqpErr *amqp.Error
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.NotFound {
		t.Fatalf("the exchange exists before the router declared it (passive declare: %v)", err)
	}

	router := l.Channel()
	if err := declareLikeRouter(t, router, exchange, ae); err != nil {
		t.Fatalf("declare as the router: %v", err)
	}
	l.waitFor("the runner declares and binds its queue", 10*time.Second, func() bool {
		return l.logs.contains("inbox runner consuming")
	})
	if _, err := l.Channel().QueueDeclarePassive(queue, true, false, false, false, nil); err != nil {
		t.Fatalf("the runner's queue: %v", err)
	}
	var events []inbox.Event
	for v := int64(1); v <= 10; v++ {
		events = append(events, order("order-1", v, v))
	}
	l.publishTo(exchange, events)
	l.waitFor("every event applied", 30*time.Second, func() bool {
		return l.Count(`SELECT count(*) FROM applied_log`) == int64(len(events))
	})
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if err := declareLikeRouter(t, l.Channel(), exchange, ae); err != nil {
		t.Errorf("the router's declaration was disturbed: declaring it again fails: %v", err)
	}
	want(t, "amount", l.Amount("order-1"), 55)
	// A quorum queue: declaring it as a classic one is refused.
	_, err = l.Channel().QueueDeclare(queue, true, false, false, false, amqp.Table{amqp.QueueTypeArg: amqp.QueueTypeClassic})
	if !errors.As(err, &amqpErr) || amqpErr.Code != amqp.PreconditionFailed {
		t.Errorf("declaring the runner's queue as classic: %v, want 406 (it is a quorum queue)", err)
	}
	summary(t, "the runner waited for exchange %s, then applied %d events", exchange, len(events))
}
