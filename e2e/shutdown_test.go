package e2e

import (
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/internal/testenv"
)

// TestShutdownTimeoutBoundsAStopWhileTheBrokerStalls stops a router whose broker connection stopped
// forwarding (through the test proxy; a broker alarm looks the same to the router: nothing is read, no
// confirm comes), once with the publish window full (Publish blocked in the middle of a transaction) and
// once with a few events unconfirmed (the drain waits for confirms that never come). SIGTERM must end the
// process within --shutdown-timeout plus a second, and a router started afterwards delivers every event.
func TestShutdownTimeoutBoundsAStopWhileTheBrokerStalls(t *testing.T) {
	const timeout = 3 * time.Second
	// A binary built with -race sleeps a second at exit (GORACE atexit_sleep_ms) after the router is done.
	t.Setenv("GORACE", strings.TrimSpace(os.Getenv("GORACE")+" atexit_sleep_ms=0"))
	for _, tc := range []struct {
		name    string
		stalled int // events written after the connection stalled
		maxTxn  int
	}{
		{"full window", 3000, 200},
		{"confirms missing", 10, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newStreamEnv(t)
			c := e.consume(e.queue)
			p := testenv.NewProxy(t, strings.TrimSuffix(e.amqpURL[strings.Index(e.amqpURL, "@")+1:], "/"))
			r := e.start("amqp://guest:guest@"+p.Addr+"/", "--shutdown-timeout", timeout.String(), "--window", "64")
			r.waitLog("msg=streaming ", 20*time.Second)
			w := newWriter(t, e.pgURL, 50)
			w.write(200, 20, 0)
			c.waitFor(t, w.rows, 30*time.Second)
			p.Pause()
			w.write(tc.stalled, tc.maxTxn, 0)
			time.Sleep(2 * time.Second) // the stream reads them and publishes into the stalled connection
			signalled := time.Now()
			r.signal(syscall.SIGTERM)
			code := r.wait(timeout + 20*time.Second)
			took := r.ExitAt.Sub(signalled)
			t.Logf("%s: SIGTERM with --shutdown-timeout %v while the broker connection stalls: exit %d after %v",
				tc.name, timeout, code, took.Round(time.Millisecond))
			if took > timeout+time.Second {
				t.Errorf("the stop took %v, want at most --shutdown-timeout %v + 1s", took.Round(time.Millisecond), timeout)
			}
			if code != 0 {
				t.Errorf("exit code %d after SIGTERM, want 0", code)
			}
			p.Cut()
			e.startStreaming()
			w.write(100, 20, 0)
			expectEveryEventInOrder(t, c, w, tc.name+" then restarted", 60*time.Second)
		})
	}
}
