//go:build consumergroups

package e2e

import (
	"syscall"
	"testing"
	"time"
)

// TestConsumerGroupUnderFaults: two projections, each a partitioned consumer group of 4 partitions with
// four instances, consume the real router's events while writers change 50 accounts, on a RabbitMQ node
// of the test's own (of the suite's broker's version); meanwhile instances are SIGKILLed, started,
// stopped gracefully and cut from the broker (a TCP proxy), the node's RabbitMQ restarts, PostgreSQL
// crashes (immediate stop) and later restarts fast. At the end, for each projection, every event was
// applied exactly once, in version order (the handler fails an event at another version than the next),
// none ever parked, and the balances equal the accounts table. About 75 s; make test-consumer-groups.
// TestShortConsumerGroupUnderFaults, its cut in make test, has a share of these faults.
func TestConsumerGroupUnderFaults(t *testing.T) {
	begun := time.Now()
	x := newGroupWorld(t, 4)
	a, b := x.a, x.b
	x.write(4)
	x.at(3, "ledger-a instance 1 SIGKILL")
	a.instances["1"].stop(syscall.SIGKILL, 10*time.Second)
	x.at(5, "ledger-a instance 1 started again; ledger-b instance 3 SIGKILL")
	a.start("1 (restarted)", false)
	b.instances["3"].stop(syscall.SIGKILL, 10*time.Second)
	x.at(7, "both proxied instances' broker connections cut")
	a.proxy.Cut()
	b.proxy.Cut()
	x.at(9, "ledger-b instance 5 joins")
	b.start("5", false)
	x.at(11, "ledger-a instance 3 SIGTERM (leaves gracefully)")
	if code := a.instances["3"].stop(syscall.SIGTERM, 30*time.Second); code != 0 {
		t.Errorf("ledger-a instance 3 exited with %d after SIGTERM, want 0", code)
	}
	x.at(13, "ledger-a instance 5 joins; proxied connections cut again")
	a.start("5", false)
	a.proxy.Cut()
	b.proxy.Cut()
	x.at(15, "broker stop_app for 3 s")
	x.restartBroker(func() { time.Sleep(3 * time.Second) })
	x.at(max(24, x.elapsed()+2), "PostgreSQL crash (immediate stop)")
	x.restartPostgres("immediate")
	x.at(max(29, x.elapsed()+2), "ledger-b instance 1 SIGKILL")
	b.instances["1"].stop(syscall.SIGKILL, 10*time.Second)
	x.at(max(31, x.elapsed()+2), "PostgreSQL fast restart")
	x.restartPostgres("fast")
	x.at(max(35, x.elapsed()+3), "writers stop") // a few changes after every fault
	x.finish(2 * time.Minute)
	t.Logf("%5.1fs  in all", time.Since(begun).Seconds())
}
