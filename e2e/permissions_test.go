package e2e

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/cdc"
	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestWriteRevokedOnTheRouterExchangeStopsNamingTheFix: a router whose RabbitMQ user may declare its
// topology but not publish to its own exchange (write taken away, as an operator revoking it while the
// router runs does) gets a 403 ACCESS_REFUSED channel close for every event. It used to restart the stream
// forever with a WARN carrying the broker's words only (the chaos harness's permissions-revoked, seed 77).
// Now it stops with one ERROR naming the permission to grant, acknowledges nothing past the refused event,
// and a start with the permission back publishes it.
func TestWriteRevokedOnTheRouterExchangeStopsNamingTheFix(t *testing.T) {
	e := newStreamEnv(t)
	refused := testenv.RabbitMQUser(t, "^(?!"+regexp.QuoteMeta(e.exchange)+"$).*")
	c := e.consume(e.queue)
	r := e.start(refused, "--snapshot", "never")
	r.waitLog("msg=streaming ", 60*time.Second)
	id := e.insertOne("public.outbox", "o-1")
	after, err := cdc.ParseLSN(e.scalar(`SELECT pg_current_wal_lsn()::text`))
	if err != nil {
		t.Fatal(err)
	}
	r.expectExit(60*time.Second, `level=ERROR msg="exiting: the router does not retry this"`, "403 ACCESS_REFUSED",
		"grant it write permission", "rabbitmqctl set_permissions", e.exchange)
	if n := strings.Count(r.Output(), "restarting from the acknowledged position"); n > 0 {
		t.Errorf("the router restarted %d times on the refusal before it stopped:\n%s", n, tail(r.Output(), 20))
	}
	if got := e.ackedPosition(); got >= after {
		t.Errorf("the slot acknowledged %s, past the refused event (committed before %s)", got, after)
	}
	r2 := e.start("", "--snapshot", "never")
	defer r2.Kill()
	firstDeliveries(t, c, []string{id}, 30*time.Second)
}
