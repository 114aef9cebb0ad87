package runner_test

import (
	"strings"
	"testing"
	"time"

	"github.com/cdc-router/cdc-router/inbox/runner"
)

func TestRunnerConfigDefaults(t *testing.T) {
	c := runner.Config{}.Defaults()
	want(t, "Exchange", c.Exchange, "outbox")
	want(t, "Workers", c.Workers, 4)
	want(t, "Prefetch", c.Prefetch, 64)
	want(t, "DrainTimeout", c.DrainTimeout, 30*time.Second)
	want(t, "RetryMin", c.RetryMin, 100*time.Millisecond)
	want(t, "RetryMax", c.RetryMax, 10*time.Second)
	want(t, "ReconnectMin", c.ReconnectMin, 500*time.Millisecond)
	want(t, "ReconnectMax", c.ReconnectMax, 30*time.Second)
	want(t, "ExchangeWaitLog", c.ExchangeWaitLog, 30*time.Second)
	want(t, "Prefetch with 100 workers", runner.Config{Workers: 100}.Defaults().Prefetch, 100)
}

func TestRunnerConfigValidate(t *testing.T) {
	ok := runner.Config{URLs: []string{"amqp://u:secret@localhost:5672/"}, Queue: "q", Bindings: []string{"order.#"}}
	for _, tc := range []struct {
		name   string
		change func(*runner.Config)
		err    string // empty: valid
	}{
		{"valid", func(*runner.Config) {}, ""},
		{"no URL", func(c *runner.Config) { c.URLs = nil }, "set runner.Config.URLs"},
		{"bad URL", func(c *runner.Config) { c.URLs = []string{"http://x"} }, "URLs[0] is not an AMQP URL"},
		{"no queue", func(c *runner.Config) { c.Queue = "" }, "Queue is empty"},
		{"no binding", func(c *runner.Config) { c.Bindings = nil }, "Bindings is empty"},
		{"empty binding", func(c *runner.Config) { c.Bindings = []string{""} }, `use "#"`},
		{"negative workers", func(c *runner.Config) { c.Workers = -1 }, "Workers -1"},
		{"prefetch below workers", func(c *runner.Config) { c.Workers, c.Prefetch = 8, 4 }, "Prefetch 4 must be between Workers (8)"},
		{"retry range", func(c *runner.Config) { c.RetryMin, c.RetryMax = time.Second, time.Millisecond }, "RetryMin"},
		{"reconnect range", func(c *runner.Config) { c.ReconnectMin, c.ReconnectMax = time.Second, time.Millisecond }, "ReconnectMin"},
		{"negative drain", func(c *runner.Config) { c.DrainTimeout = -time.Second }, "DrainTimeout"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := ok
			tc.change(&c)
			err := c.Defaults().Validate()
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("Validate: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("Validate: %v, want an error containing %q", err, tc.err)
			case err != nil && strings.Contains(err.Error(), "secret"):
				t.Errorf("the error shows the password: %v", err)
			}
		})
	}
}
