package testenv

import (
	"fmt"
	"strings"
	"testing"
)

// brokerSettingsExpr reads the broker-wide settings a test or a setup script could change: the memory high
// watermark (a fraction, or {absolute, Bytes}), the disk free limit, max_message_size (the application's
// environment, read by 3.x, and the persistent term 4.x reads) and the resource alarms in effect.
const brokerSettingsExpr = `{vm_memory_monitor:get_vm_memory_high_watermark(), rabbit_disk_monitor:get_disk_free_limit(), ` +
	`application:get_env(rabbit, max_message_size), persistent_term:get(max_message_size, undefined), rabbit_alarm:get_alarms()}.`

// BrokerSettings is the broker's broker-wide settings as one Erlang term (see brokerSettingsExpr) followed
// by its global parameters, for a test that checks that something left them as it found them.
func BrokerSettings(t testing.TB) string {
	t.Helper()
	return rabbitmqctlOutput(t, "eval", brokerSettingsExpr) + "\n" +
		rabbitmqctlOutput(t, "-q", "list_global_parameters")
}

// SetMemoryHighWatermark sets the broker's vm_memory_high_watermark to value ("0" raises a memory alarm
// that blocks every publisher of the broker) and returns a function that puts back the value the broker had
// before, whatever it was (a fraction or an absolute limit); the test's cleanup calls it too. The setting
// is broker-wide: a test that uses it must not run beside another that publishes (make test runs -p 1).
func SetMemoryHighWatermark(t testing.TB, value string) (restore func()) {
	t.Helper()
	was := rabbitmqctlOutput(t, "eval", "vm_memory_monitor:get_vm_memory_high_watermark().")
	if was == "" || strings.ContainsAny(was, "\n") {
		t.Fatalf("rabbitmqctl eval: unexpected vm_memory_high_watermark %q", was)
	}
	restored := false
	restore = func() {
		if restored {
			return
		}
		restored = true
		out, err := Rabbitmqctl(t, "eval", fmt.Sprintf("vm_memory_monitor:set_vm_memory_high_watermark(%s).", was)).CombinedOutput()
		if err != nil {
			t.Errorf("restore vm_memory_high_watermark %s: %v: %s (restore it by hand: rabbitmqctl eval "+
				"'vm_memory_monitor:set_vm_memory_high_watermark(%s).')", was, err, out, was)
		}
	}
	t.Cleanup(restore)
	rabbitmqctlOutput(t, "set_vm_memory_high_watermark", value)
	return restore
}

// rabbitmqctlOutput runs Rabbitmqctl and returns its trimmed output, failing the test when it fails.
func rabbitmqctlOutput(t testing.TB, args ...string) string {
	t.Helper()
	out, err := Rabbitmqctl(t, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("rabbitmqctl %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}
