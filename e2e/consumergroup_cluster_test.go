//go:build cluster && consumergroups

package e2e

import (
	"context"
	"testing"
	"time"
)

// TestClusterConsumerGroup: a consumer group of 4 quorum partitions, three instances each connected first
// to another node of a three-node cluster (rabbitmq-cluster.sh, on ports of its own), consumes the real
// router's events while writers change 50 accounts; node 2 is stopped and started again, then node 3 is
// SIGKILLed and started again. Every event is applied exactly once, in order, none parked, the balances
// equal the accounts table. Run: go test -tags 'cluster consumergroups' -run TestClusterConsumerGroup -v ./e2e/
func TestClusterConsumerGroup(t *testing.T) {
	// Ports, names and directory of its own, so that make test-cluster can run beside it.
	t.Setenv("CLUSTER_PORT_BASE", "5790")
	t.Setenv("CLUSTER_DIST_BASE", "25790")
	t.Setenv("CLUSTER_PREFIX", "cdcgroup")
	t.Setenv("CLUSTER_DIR", "/tmp/cdc-router-group-cluster")
	cl := startCluster(t)
	e := newEnv(t)
	e.amqpURL = cl.urls[0] // node 1 stays up: the test's own reads and cleanup go there
	e.exec(accountsSQL)
	e.exec(`INSERT INTO accounts (id, balance, version)
		SELECT format('acct-%s', lpad(i::text, 3, '0')), 0, 0 FROM generate_series(0, 49) i`)
	r := e.start(cl.list(1), "--unroutable-queue-type", "quorum")
	r.waitLog("msg=streaming ", 30*time.Second)
	g := newConsumerGroup(t, e, "ledger")
	for n := 1; n <= 3; n++ {
		g.startAt(string(rune('0'+n)), cl.list(n), "E2E_QUORUM=true")
	}
	g.waitConsumed(time.Minute)
	w := &accountsWriter{url: e.pgURL, accounts: 50, pause: 15 * time.Millisecond}
	ctx, stopWriters := context.WithCancel(context.Background())
	waitWriters := w.run(ctx, 4)
	t.Cleanup(func() { stopWriters(); waitWriters() })
	t0 := time.Now()
	at := func(sec float64, what string) {
		time.Sleep(time.Until(t0.Add(time.Duration(sec * float64(time.Second)))))
		t.Logf("%5.1fs  %s (%d changes committed so far)", time.Since(t0).Seconds(), what, w.committed.Load())
	}
	at(3, "node 2 stopped")
	cl.run("stop-node", "2")
	at(10, "node 2 started again")
	cl.run("start-node", "2")
	at(14, "node 3 SIGKILLed")
	cl.run("kill-node", "3")
	at(20, "node 3 started again")
	cl.run("start-node", "3")
	at(24, "writers stop")
	stopWriters()
	waitWriters()
	published := number(t, e.db, `SELECT count(*) FROM outbox`)
	g.waitApplied(published, 3*time.Minute)
	t.Logf("%5.1fs  every event applied, partitions empty", time.Since(t0).Seconds())
	g.check(published)
}
