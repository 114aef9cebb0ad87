package replication

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "no PostgreSQL URL"},
		{Config{PGURL: "postgres://x", Slot: "Bad-Name"}, "slot name"},
		{Config{PGURL: "postgres://x", Snapshot: "sometimes"}, "--snapshot"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want %q", tc.cfg, err, tc.want)
		}
	}
	if err := (Config{PGURL: "postgres://x"}).WithDefaults().Validate(); err != nil {
		t.Errorf("defaults: %v", err)
	}
}
