package testenv

import (
	"net"
	"strings"
	"testing"
	"time"
)

// A node that cannot start (here its AMQP port is taken) is reported at once, with the reason from its
// log, instead of after the two minutes a node may take on a loaded machine; StartRabbitMQNode then
// retries on fresh ports.
func TestRabbitMQNodeThatCannotStartSaysWhy(t *testing.T) {
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	dist, err := nodePort()
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Now()
	n, err := tryNode(t, "", serverBin(t), held.Addr().(*net.TCPAddr).Port, dist, nil)
	if err == nil {
		t.Fatalf("node %s started on a port another process listens on", n.name)
	}
	if took := time.Since(t0); took > 90*time.Second {
		t.Errorf("the failure took %v to report; want the VM's exit noticed, not the two-minute deadline", took)
	}
	if !strings.Contains(err.Error(), "exited") || !strings.Contains(err.Error(), "--- the end of") {
		t.Errorf("the error does not say the VM exited and what its log said:\n%v", err)
	}
	t.Logf("%v", err)
}
