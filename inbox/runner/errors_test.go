package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox"
	"github.com/cdc-router/cdc-router/inbox/runner"
)

// A queue that exists with other arguments (classic, while the runner asks for quorum) is a setup that
// reconnecting cannot cure: Run returns the broker's reason and the fix.
func TestRunnerRefusesAQueueOfAnotherType(t *testing.T) {
	l := newRunnerLab(t) // its queue is a classic queue
	cfg := l.config(1)
	cfg.Quorum = true
	r, err := runner.New(l.processor(inbox.Config{}), cfg, l.logger())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- r.Run(l.Ctx) }()
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Run kept retrying a setup the broker refuses")
	}
	for _, s := range []string{"PRECONDITION_FAILED", "406", "set runner.Config.QueueType (or Quorum) to the queue's current value",
		"cannot change a queue's arguments in place"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("Run: %v, want it to say %q", err, s)
		}
	}
	summary(t, "Run: %v", err)
}

// The queue deleted under a running runner: the broker cancels the consumer, the runner logs why,
// declares and binds the queue again and applies what is published next.
func TestRunnerRedeclaresADeletedQueue(t *testing.T) {
	l := newRunnerLab(t)
	stop := l.start(l.processor(inbox.Config{}), l.config(2))
	l.publishAll([]inbox.Event{order("d", 1, 1)})
	l.waitFor("first event applied", 10*time.Second, func() bool { return l.Count(`SELECT count(*) FROM applied_log`) == 1 })
	if _, err := l.Channel().QueueDelete(l.queue, false, false, false); err != nil {
		t.Fatal(err)
	}
	l.waitFor("the cancel logged", 10*time.Second, func() bool { return l.logs.contains("RabbitMQ cancelled consumer") })
	l.waitFor("consuming again", 10*time.Second, func() bool {
		return strings.Count(l.logs.String(), "inbox runner consuming") == 2
	})
	l.publishAll([]inbox.Event{order("d", 2, 2)})
	l.waitFor("second event applied", 10*time.Second, func() bool { return l.Count(`SELECT count(*) FROM applied_log`) == 2 })
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
