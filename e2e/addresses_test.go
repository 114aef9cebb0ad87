package e2e

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestBrokerAddressListMovesToTheNextNode gives the router three broker addresses with --amqp-url
// repeated: one that refuses connections, a proxy in front of the machine's broker, and the broker itself.
// It skips the first, streams through the second, and when that connection is cut it restarts on the third
// (the address after the one it lost), losing nothing, keeping the order per aggregate, and logging each
// address as host:port only.
func TestBrokerAddressListMovesToTheNextNode(t *testing.T) {
	e := newStreamEnv(t)
	c := e.consume(e.queue)
	u, err := url.Parse(e.amqpURL)
	if err != nil {
		t.Fatal(err)
	}
	direct := u.Host
	if u.Port() == "" {
		direct = net.JoinHostPort(u.Hostname(), "5672")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	p := testenv.NewProxy(t, direct)
	r := e.start("", "--amqp-url", "amqp://guest:s3cret@"+dead+"/", "--amqp-url", "amqp://guest:guest@"+p.Addr+"/",
		"--amqp-url", e.amqpURL)
	r.waitLog("msg=streaming ", 30*time.Second)
	r.waitLog("address="+p.Addr+" ", time.Second)
	if !strings.Contains(r.Output(), `msg="RabbitMQ address failed; trying the next one" address=`+dead) {
		t.Errorf("the refusing address was not logged as skipped")
	}
	w := newWriter(t, e.pgURL, 50)
	var once sync.Once
	stopWriter := writeUntilStopped(w)
	stop := func() { once.Do(stopWriter) }
	defer stop()
	time.Sleep(1500 * time.Millisecond)
	p.Cut() // the node is lost
	r.waitLog("address="+direct+" ", 30*time.Second)
	time.Sleep(1500 * time.Millisecond)
	stop()
	got := c.waitFor(t, w.rows, 60*time.Second)
	dups, _ := duplicates(got)
	t.Logf("address list: %d events, %d deliveries, %d duplicates", len(w.rows), len(got), dups)
	checkOrder(t, got)
	if out := r.Output(); strings.Contains(out, "s3cret") || strings.Contains(out, "guest:guest@") {
		t.Errorf("the router logged a password")
	}
}

// TestInvalidAddressInListIsNamedByPosition: a bad URL in the list stops the router at once, naming its
// position and the fix, without its password.
func TestInvalidAddressInListIsNamedByPosition(t *testing.T) {
	e := newStreamEnv(t)
	r := e.start(e.amqpURL + ",amqp://guest:s3cret%zz@127.0.0.1:5672/")
	if code := r.wait(30 * time.Second); code != 2 {
		t.Errorf("exit code %d, want 2 (a usage error)", code)
	}
	out := r.Output()
	if !strings.Contains(out, "AMQP URL 2 of 2: the AMQP URL is not valid") || strings.Contains(out, "s3cret") {
		t.Errorf("want the second URL named without its password:\n%s", tail(out, 5))
	}
}
