package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestSetMemoryHighWatermarkRestoresWhatItFound: the alarm helper puts back the broker's own value, not a
// default, so that a broker configured otherwise is left as it was. 0.39 and 0.38 raise no alarm.
func TestSetMemoryHighWatermarkRestoresWhatItFound(t *testing.T) {
	AMQPURL(t)
	outer := SetMemoryHighWatermark(t, "0.39")
	before := BrokerSettings(t)
	restore := SetMemoryHighWatermark(t, "0.38")
	if got := BrokerSettings(t); got == before {
		t.Fatalf("set_vm_memory_high_watermark 0.38 changed nothing:\n%s", got)
	}
	restore()
	if got := BrokerSettings(t); got != before {
		t.Errorf("after restore the broker's settings are\n%s\nwant what they were\n%s", got, before)
	}
	outer()
}

// TestMakeDemoLeavesTheBrokerAsItFoundIt runs `make demo` (make services, then demo/run.sh: a throwaway
// PostgreSQL, migrate, run, writes and consumes for 3 s, a SIGTERM stop) against the broker the tests use,
// after setting its memory watermark to a value that is not RabbitMQ's default, and checks that the
// broker's broker-wide settings are as the test found them: the demo and `make services` change nothing of
// a broker they did not start. It also checks that the demo fetches no promtool, which it does not use.
func TestMakeDemoLeavesTheBrokerAsItFoundIt(t *testing.T) {
	url := AMQPURL(t)
	SetMemoryHighWatermark(t, "0.39")
	before := BrokerSettings(t)
	cache := t.TempDir() // a promtool fetch would land here
	cmd := exec.Command("make", "demo", "DEMO_SECONDS=3", "DEMO_QUEUE="+Name(t)+".demo", "DEMO_AMQP_URL="+url)
	cmd.Dir = ModuleRoot(t)
	cmd.Env = append(os.Environ(), "CDC_ROUTER_CACHE="+cache)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make demo: %v\n%s", err, out)
	}
	if got := BrokerSettings(t); got != before {
		t.Errorf("make demo changed the broker's settings: before\n%s\nafter\n%s\ndemo output:\n%s", before, got, out)
	}
	if entries, _ := os.ReadDir(cache); len(entries) > 0 {
		t.Errorf("make demo fetched %v into the cache, which it does not use", entries)
	}
	if !strings.Contains(string(out), "events received:") {
		t.Errorf("make demo printed no summary:\n%s", out)
	}
}
