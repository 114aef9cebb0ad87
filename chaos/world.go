package chaos

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/cdc-router/cdc-router/chaos/check"
	"github.com/cdc-router/cdc-router/chaos/gen"
	"github.com/cdc-router/cdc-router/chaos/procs"
	"github.com/cdc-router/cdc-router/chaos/record"
	"github.com/cdc-router/cdc-router/internal/testenv"
	"github.com/cdc-router/cdc-router/migrations"
)

// world is one seed's environment: its own database on the harness's cluster, an exchange and a queue on
// the shared broker (or on a node of its own, gen.Setup.OwnBroker) named after the database, and a proxy in front of each server for the routers alone
// (writers and the consumer connect directly, so a fault hits only the router).
type world struct {
	t       testing.TB
	plan    gen.Plan
	bin     string
	pg      *testenv.Postgres
	db      string // database name; also the slot and the base of every broker name
	amqpURL string // direct
	// routerAMQPURL is the routers' URL before the proxy: amqpURL, or on the harness's own node a user of
	// the run's own with the permissions docs/howto/secure.md#rabbitmq-users gives (routerPermissions).
	routerAMQPURL string
	exchange      string
	queue         string
	pgProxy       *testenv.Proxy
	mqProxy       *testenv.Proxy
	rec           *record.Recorder
	broker        *testenv.RabbitMQNode // the harness's own RabbitMQ node (gen.Setup.OwnBroker), nil on the shared broker
	parts         partitions            // the harness's partitions of public.outbox (gen.Setup.Partitioned)
	cols          columns               // the extra columns of public.outbox (gen.FaultColumn)
	drifted       atomic.Bool           // a gen.FaultDrift was restored: routers start with --on-drift=quarantine from now on
	token         string                // every payload carries it; no log line may
	// mappingConfig is the --config file of gen.MappedTable; exchangeDown is set while an exchange fault
	// has the topic's exchange away.
	mappingConfig string
	exchangeDown  atomic.Bool

	// inflightN counts the gen.CmdResetInFlight and gen.CmdRetireInFlight applied; inflightRows are the rows
	// their transactions wrote (finalRows joins them with the tables, as the writers' rows).
	inflightMu   sync.Mutex
	inflightN    int
	inflightRows []check.Row

	hugeCommitted chan struct{} // closed when the huge transaction committed, at hugeAt
	hugeAt        time.Time

	procPG []*testenv.Proxy // with gen.Setup.Standby: each router process's own proxy in front of pgProxy

	routers *procs.Set // by process: one per slot, two with a standby (standby.go)

	inbox *inboxConsumer // the consumer of a gen.CmdInboxRequests, once it is set up (inboxreq.go)
}

func newWorld(t testing.TB, pg *testenv.Postgres, bin string, plan gen.Plan) *world {
	t.Helper()
	url := pg.NewDatabase(t)
	w := &world{t: t, plan: plan, bin: bin, pg: pg, rec: &record.Recorder{},
		token: fmt.Sprintf("chaos-payload-%d", plan.Setup.Seed), hugeCommitted: make(chan struct{})}
	w.db = url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
	w.exchange, w.queue = "x_"+w.db, "q_"+w.db
	w.pgProxy = testenv.NewProxy(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
	if plan.Setup.OwnBroker {
		w.broker = testenv.StartRabbitMQNode(t, fmt.Sprintf("max_message_size = %d", gen.MaxMessageSize))
		w.amqpURL = w.broker.URL()
		w.mqProxy = testenv.NewProxy(t, w.broker.Addr())
	} else {
		w.amqpURL = inVhost(testenv.AMQPURL(t), vhost)
		w.mqProxy = testenv.NewProxy(t, testenv.AMQPAddr(t))
	}
	w.routerAMQPURL = w.amqpURL
	w.rec.With(func(h *check.History) { h.Setup = plan.Setup })
	t.Cleanup(w.deleteTopology)
	return w
}

// directURL is the database's URL without the proxy, for writers and commands.
func (w *world) directURL() string { return w.pg.URL(w.db) }

func (w *world) proxiedPGURL() string {
	user := "postgres"
	if w.plan.Setup.OwnBroker {
		user = w.pgRouterRole()
	}
	return fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable", user, w.pgProxy.Addr, w.db)
}

func (w *world) proxiedAMQPURL() string {
	u, _ := amqp.ParseURI(w.routerAMQPURL)
	v := "" // the default vhost, "/"
	if u.Vhost != "/" {
		v = url.PathEscape(u.Vhost)
	}
	return fmt.Sprintf("amqp://%s:%s@%s/%s", u.Username, u.Password, w.mqProxy.Addr, v)
}

// cli runs a cdc-router command against the servers directly and returns its output and exit code. Its
// output lines go into the history as router -1.
func (w *world) cli(timeout time.Duration, args ...string) (string, int) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, w.bin, args...)
	cmd.Env = append(os.Environ(), "CDC_ROUTER_PG_URL="+w.directURL(), "CDC_ROUTER_AMQP_URL="+w.amqpURL,
		"CDC_ROUTER_EXCHANGE="+w.exchange)
	out, _ := cmd.CombinedOutput()
	lw := record.NewLogWriter(w.rec, -1, 0)
	lw.Write(append(out, '\n'))
	return string(out), cmd.ProcessState.ExitCode()
}

// migrateArgs is the world's migrate command: run again later (gen.CmdRetireInFlight), with the same flags, it
// changes nothing of what setUp made.
func (w *world) migrateArgs() []string {
	s := w.plan.Setup
	args := []string{"migrate", "--amqp-url", w.amqpURL, "--unroutable-queue-type", s.UnroutableType}
	if s.Shards > 0 {
		args = append(args, "--shards", fmt.Sprint(s.Shards))
	}
	if s.Partitioned {
		args = append(args, "--partitioned")
	}
	if s.Emit {
		args = append(args, "--emit-function", "--emit-role", w.writerRole())
	}
	return args
}

// setUp migrates the database (the outbox, the publications, the exchange), adds the second table, and
// declares the consumer's queue bound to every routing key.
func (w *world) setUp() error {
	s := w.plan.Setup
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, w.directURL())
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	if s.Emit {
		if err := w.createEmitRoles(ctx, conn); err != nil {
			return err
		}
	}
	args := w.migrateArgs()
	if w.plan.Has(gen.CmdInboxRequests) {
		args = append(args, "--inbox") // the inbox tables of the kind's consumer (inboxreq.go)
	}
	if s.OwnBroker {
		if err := w.addRouterUser(); err != nil {
			return fmt.Errorf("the routers' user: %w", err)
		}
	}
	if out, code := w.cli(2*time.Minute, args...); code != 0 {
		return fmt.Errorf("migrate exited %d: %s", code, out)
	}
	for _, table := range s.Tables[1:] {
		if table == gen.MappedTable {
			if err := w.createMappedTable(ctx, conn); err != nil {
				return err
			}
			if err := w.writeMappingConfig(); err != nil {
				return err
			}
			continue
		}
		if _, err := conn.Exec(ctx, `CREATE TABLE `+table+` (LIKE public.outbox INCLUDING ALL)`); err != nil {
			return err
		}
		if _, err := conn.Exec(ctx, `ALTER PUBLICATION cdc_router_outbox ADD TABLE `+table); err != nil {
			return err
		}
	}
	if s.Partitioned {
		if note := w.attachPartition(); !strings.HasPrefix(note, "public.") || strings.Contains(note, ":") {
			return fmt.Errorf("attach the first partition: %s", note)
		}
	}
	if s.Emit {
		if err := w.grantWriter(ctx, conn); err != nil {
			return fmt.Errorf("grant the writer role: %w", err)
		}
	}
	if w.plan.Setup.OwnBroker {
		if err := w.createPGRouterRole(ctx, conn); err != nil {
			return fmt.Errorf("the routers' role: %w", err)
		}
	}
	c, err := amqp.Dial(w.amqpURL)
	if err != nil {
		return err
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(w.queue, true, false, false, false, amqp.Table{"x-queue-type": s.QueueType}); err != nil {
		return fmt.Errorf("declare queue: %w", err)
	}
	if err := ch.QueueBind(w.queue, "#", w.exchange, false, nil); err != nil {
		return err
	}
	if s.ExchangeByTopic {
		if err := w.declareTopicExchange(ch); err != nil {
			return err
		}
	}
	if s.FullQueue {
		return w.declareFullQueue(ch)
	}
	return nil
}

// declareFullQueue declares the run's own full queue (Setup.FullQueue): one message in it, at most one
// allowed, further ones refused; bound to order.refused only. The message is persistent, so that a broker
// restart (own_broker) does not empty the queue.
func (w *world) declareFullQueue(ch *amqp.Channel) error {
	args := amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"}
	if _, err := ch.QueueDeclare(w.queue+"_full", true, false, false, false, args); err != nil {
		return fmt.Errorf("declare the full queue: %w", err)
	}
	if err := ch.Confirm(false); err != nil {
		return err
	}
	c, err := ch.PublishWithDeferredConfirm("", w.queue+"_full", false, false, amqp.Publishing{Body: []byte("filler"), DeliveryMode: amqp.Persistent})
	if err != nil {
		return err
	}
	if ok, err := c.WaitContext(context.Background()); err != nil || !ok {
		return fmt.Errorf("fill the full queue: confirmed %v, %v", ok, err)
	}
	return ch.QueueBind(w.queue+"_full", "order.refused", w.exchange, false, nil)
}

func (w *world) deleteTopology() {
	c, err := amqp.Dial(w.amqpURL)
	if err != nil {
		return
	}
	defer c.Close()
	ch, err := c.Channel()
	if err != nil {
		return
	}
	ch.QueueDelete(w.queue, false, false, false)
	ch.QueueDelete(w.queue+"_full", false, false, false)
	ch.QueueDelete(w.exchange+".unroutable", false, false, false)
	ch.ExchangeDelete(w.exchange, false, false)
	ch.ExchangeDelete(w.topicExchange(), false, false)
	ch.ExchangeDelete(w.exchange+".unroutable", false, false)
}

// slot is the slot of router i.
func (w *world) slot(i int) string {
	if n := w.plan.Setup.Shards; n > 0 {
		return migrations.ShardSlot(w.db, i, n)
	}
	return w.db
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}
