#!/usr/bin/env bash
# Makes sure what the test suite and the demo need is on this machine: PostgreSQL server binaries (the
# tests and the demo start their own throwaway cluster with wal_level=logical) and a reachable RabbitMQ
# (started here when none answers). Installs missing packages from Debian when run as root. It changes
# nothing of a broker that is already running. Safe to run any number of times. What single tests need
# beyond that (promtool, other PostgreSQL versions) they fetch themselves, into /var/cache/cdc-router.
set -euo pipefail

have_pg() { command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ] || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; }
amqp_up() { (exec 3<>/dev/tcp/127.0.0.1/5672) 2>/dev/null; }
apt_install() {
  if [ "$(id -u)" != 0 ]; then echo "missing $*: install it (apt-get install $*)" >&2; exit 1; fi
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}

if ! have_pg; then
  echo "ensure-services: installing PostgreSQL server binaries" >&2
  apt_install postgresql
fi

if ! amqp_up; then
  if ! command -v rabbitmq-server >/dev/null 2>&1; then
    echo "ensure-services: installing RabbitMQ" >&2
    apt_install rabbitmq-server
  fi
  echo "ensure-services: starting RabbitMQ" >&2
  rabbitmq-server -detached >/dev/null 2>&1 || true
  for _ in $(seq 1 120); do amqp_up && break; sleep 1; done
  if ! amqp_up; then echo "ensure-services: RabbitMQ did not start on 127.0.0.1:5672" >&2; exit 1; fi
  rabbitmqctl await_startup >/dev/null 2>&1 || true
fi
# Nothing here changes a setting of the broker (it may be a team's shared one): a resource alarm in effect
# is reported, not cleared. The alarm test restores the watermark it found; only a run killed in the
# middle of it leaves the alarm behind.
if command -v rabbitmqctl >/dev/null 2>&1; then
  alarms=$(rabbitmqctl -q eval 'rabbit_alarm:get_alarms().' 2>/dev/null || true)
  if [ -n "$alarms" ] && [ "$alarms" != "[]" ]; then
    echo "ensure-services: RabbitMQ has a resource alarm in effect ($alarms): every publisher blocks until it clears;" \
      "if a killed test run left vm_memory_high_watermark at 0, restore it (rabbitmqctl set_vm_memory_high_watermark 0.4)" >&2
  fi
fi
echo "ensure-services: PostgreSQL binaries present, RabbitMQ reachable on 127.0.0.1:5672" >&2
