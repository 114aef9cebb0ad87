package inbox

import (
	"strings"
	"testing"
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
