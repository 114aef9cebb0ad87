package inbox

import (
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  Config
		want string // substring of the error; "" for none
	}{
		{"named", Config{Consumer: "billing"}, ""},
		{"no consumer", Config{}, "set inbox.Config.Consumer"},
		{"long consumer", Config{Consumer: strings.Repeat("x", 64)}, "longer than 63"},
		{"63 characters", Config{Consumer: strings.Repeat("é", 63)}, ""},
		{"requeue with prefetch 1", Config{Consumer: "c", OnGap: Requeue, Prefetch: 1}, "raise Prefetch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Defaults().Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("Validate: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("Validate: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestDefaultsAndTimeouts(t *testing.T) {
	c := Config{Consumer: "c"}.Defaults()
	if c.LockTimeout != 5*time.Second || c.StatementTimeout != 30*time.Second || c.MaxAttempts != 10 {
		t.Fatalf("defaults = %v %v %d, want 5s 30s 10", c.LockTimeout, c.StatementTimeout, c.MaxAttempts)
	}
	for _, tc := range []struct {
		lock, statement time.Duration
		want            string
	}{
		{5 * time.Second, 30 * time.Second, "SELECT set_config('lock_timeout', '5000ms', true), set_config('statement_timeout', '30000ms', true)"},
		{-1, 1500 * time.Microsecond, "SELECT set_config('statement_timeout', '2ms', true)"},
		{time.Microsecond, -1, "SELECT set_config('lock_timeout', '1ms', true)"},
		{-1, -1, ""},
	} {
		if got := timeoutsSQL(tc.lock, tc.statement); got != tc.want {
			t.Errorf("timeoutsSQL(%v, %v) = %q, want %q", tc.lock, tc.statement, got, tc.want)
		}
	}
	if c := (Config{Consumer: "c", LockTimeout: -1, MaxAttempts: -1}).Defaults(); c.LockTimeout != -1 || c.MaxAttempts != -1 {
		t.Fatalf("negative values changed by Defaults: %+v", c)
	}
}
