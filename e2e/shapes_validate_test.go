package e2e

import (
	"testing"
	"time"
)

// quarkusOutbox is the table Quarkus' Debezium outbox extension creates (payload varchar(8000)).
const quarkusOutbox = `CREATE TABLE q_outbox (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL,
	aggregateid varchar(255) NOT NULL, type varchar(255) NOT NULL, timestamp timestamp NOT NULL,
	payload varchar(8000), tracingspancontext varchar(256))`

// TestValidateJSONQuarantinesTextThatIsNotJSON: with amqp.validate.json=true and a JSON content type, a
// varchar payload that is not JSON is quarantined with the reason naming the option, by the initial
// snapshot and by the stream alike, and the valid rows are published as stored.
func TestValidateJSONQuarantinesTextThatIsNotJSON(t *testing.T) {
	e := mappedEnv(t, "q_outbox", quarkusOutbox)
	insert := `INSERT INTO q_outbox (id, aggregatetype, aggregateid, type, timestamp, payload) VALUES ($1, 'Order', 'o-1', 'Created', now(), $2)`
	e.exec(insert, "a0000000-0000-4000-8000-000000000001", `{"n": 1}`)
	e.exec(insert, "a0000000-0000-4000-8000-000000000002", `{"n": 2`)
	c := e.consume(e.queue)
	config := writeConfig(t, "amqp.content.type=application/json\namqp.validate.json=true\ntable.field.event.timestamp=timestamp\n")
	e.startStreaming("--table", "public.q_outbox", "--publication", "q_outbox_pub", "--config", config)
	e.exec(insert, "b0000000-0000-4000-8000-000000000003", `<order n="3"/>`)
	e.exec(insert, "b0000000-0000-4000-8000-000000000004", `{"n": 4}`)
	q := e.waitQuarantined(2, 30*time.Second)
	const reason = "payload is not valid JSON (amqp.validate.json), though the message's content type is application/json"
	for _, id := range []string{"a0000000-0000-4000-8000-000000000002", "b0000000-0000-4000-8000-000000000003"} {
		if q[id] != reason {
			t.Errorf("quarantine of %s: %q, want %q", id, q[id], reason)
		}
	}
	got := e.deliveriesByID(c, 2)
	for id, body := range map[string]string{"a0000000-0000-4000-8000-000000000001": `{"n": 1}`, "b0000000-0000-4000-8000-000000000004": `{"n": 4}`} {
		if m := got[id]; string(m.Body) != body || m.ContentType != "application/json" {
			t.Errorf("%s: body %q content type %q", id, m.Body, m.ContentType)
		}
	}
}
