#!/usr/bin/env bash
# `make demo` without Docker: a throwaway PostgreSQL (wal_level=logical, run as the postgres user when
# root), `cdc-router migrate`, `cdc-router run` in the background, and the demo writer and consumer for
# DEMO_SECONDS so events show up in this terminal. Everything it starts is stopped on exit and on Ctrl-C.
# Needs PostgreSQL server binaries and RabbitMQ on DEMO_AMQP_URL (`make services` sees to both).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=${DEMO_SECONDS:-15}
amqp_url=${DEMO_AMQP_URL:-amqp://guest:guest@127.0.0.1:5672/}
queue=${DEMO_QUEUE:-demo.events}
work=$(mktemp -d "${TMPDIR:-/tmp}/cdc-router-demo.XXXXXX")
pg_pid="" router_pid="" demo_pid="" demo_done="" interrupted=""

if [ -t 1 ]; then bold=$'\033[1m' plain=$'\033[0m'; else bold="" plain=""; fi
say() { printf '%sdemo:%s %s\n' "$bold" "$plain" "$*"; }
running() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null; }

# stop sends SIGTERM to pid and waits up to $2 seconds for it to exit; returns its exit code.
stop() {
  local pid=$1 limit=$2 i
  running "$pid" || { wait "$pid" 2>/dev/null; return $?; }
  kill -TERM "$pid" 2>/dev/null || true
  for ((i = 0; i < limit * 10; i++)); do running "$pid" || break; sleep 0.1; done
  if running "$pid"; then echo "demo: pid $pid did not stop within ${limit}s, killing it" >&2; kill -KILL "$pid" 2>/dev/null || true; fi
  wait "$pid" 2>/dev/null
}

show_router_log() {
  if [ -s "$work/router.log" ]; then
    echo "---- cdc-router run log ($work/router.log, last 40 lines) ----" >&2
    tail -n 40 "$work/router.log" >&2
    echo "----" >&2
  fi
}

fail() {
  echo "demo: $*" >&2
  show_router_log
  exit 1
}

cleanup() {
  local code=$?
  trap - EXIT INT TERM
  if running "$router_pid"; then stop "$router_pid" 40 || true; fi
  if [ -z "$demo_done" ] && command -v rabbitmqctl >/dev/null 2>&1; then
    rabbitmqctl -q delete_queue "$queue" >/dev/null 2>&1 || true # the demo was cut short before deleting it
  fi
  if running "$pg_pid"; then stop "$pg_pid" 40 || true; fi # the demo program removes its cluster on SIGTERM
  if [ "$code" = 0 ] || [ "$code" = 130 ]; then rm -rf "$work"; else echo "demo: logs kept in $work" >&2; fi
  exit "$code"
}
trap cleanup EXIT
on_interrupt() {
  echo
  if running "$demo_pid"; then
    say "interrupted: stopping the demo writer and consumer"
    interrupted=1
    kill -TERM "$demo_pid" 2>/dev/null || true
    return
  fi
  say "interrupted, cleaning up"
  exit 130
}
trap on_interrupt INT TERM

say "building bin/cdc-router and bin/cdc-router-demo"
go build -o bin/cdc-router ./cmd/cdc-router
go build -o bin/cdc-router-demo ./cmd/cdc-router-demo

# setsid: a Ctrl-C reaches only the foreground demo; the trap then stops the router before PostgreSQL.
say "starting a throwaway PostgreSQL cluster with wal_level=logical"
# The files exist before the background jobs start: the polling below reads them under set -e, and the
# job's own redirection may not have created them yet (make demo once failed on exactly that).
: >"$work/pg.out"
: >"$work/pg.err"
: >"$work/router.log"
setsid bin/cdc-router-demo --local-postgres >"$work/pg.out" 2>"$work/pg.err" </dev/null &
pg_pid=$!
pg_url=""
for _ in $(seq 1 600); do
  pg_url=$(sed -n 's/^pg-url //p' "$work/pg.out")
  [ -n "$pg_url" ] && break
  running "$pg_pid" || fail "the local PostgreSQL did not start: $(cat "$work/pg.err")"
  sleep 0.1
done
[ -n "$pg_url" ] || fail "the local PostgreSQL did not start within 60s: $(cat "$work/pg.err")"
say "PostgreSQL: $pg_url"

export CDC_ROUTER_PG_URL=$pg_url CDC_ROUTER_AMQP_URL=$amqp_url
bin/cdc-router migrate || fail "cdc-router migrate failed"

# The router's settings in a configuration file (docs/configuration.md); the URLs, which carry passwords,
# stay in the environment, which overrides the file.
cat >"$work/router.yaml" <<'YAML'
slot: cdc_router
publication: cdc_router_outbox
table: [public.outbox]
exchange: outbox
YAML
say "starting cdc-router run --config-file $work/router.yaml (log: $work/router.log)"
setsid bin/cdc-router run --config-file "$work/router.yaml" >"$work/router.log" 2>&1 </dev/null &
router_pid=$!
for _ in $(seq 1 300); do
  grep -q 'msg=streaming' "$work/router.log" && break
  running "$router_pid" || fail "cdc-router run exited before streaming"
  sleep 0.1
done
grep -q 'msg=streaming' "$work/router.log" || fail "cdc-router run did not start streaming within 30s"
say "router is streaming; writing orders for ${seconds}s (Ctrl-C stops early)"

# The demo runs in its own session and the script waits for it: a Ctrl-C interrupts the wait, and the trap
# asks the demo to stop (it deletes its queue), after which the summary is printed as usual.
setsid bin/cdc-router-demo --write --consume --duration "${seconds}s" --delete-queue --queue "$queue" \
  --pg-url "$pg_url" --amqp-url "$amqp_url" >"$work/demo.out" 2>&1 </dev/null &
demo_pid=$!
tail -n +1 -f --pid="$demo_pid" "$work/demo.out" &
tail_pid=$!
set +e
wait "$demo_pid"
demo_code=$?
while running "$demo_pid"; do wait "$demo_pid"; demo_code=$?; done
wait "$tail_pid"
set -e
demo_done=1
if [ -z "$interrupted" ] && [ "$demo_code" != 0 ]; then fail "cdc-router-demo exited with code $demo_code"; fi

say "stopping cdc-router (SIGTERM)"
stop "$router_pid" 40 && router_code=0 || router_code=$?
[ "$router_code" = 0 ] || fail "cdc-router run exited with code $router_code after SIGTERM"

written=$(sed -n 's/^demo: wrote \([0-9]*\) events.*/\1/p' "$work/demo.out")
received=$(sed -n 's/^demo: wrote [0-9]* events, received \([0-9]*\) of them.*/\1/p' "$work/demo.out")
echo
say "summary"
echo "  events written:  ${written:-0}"
echo "  events received: ${received:-0}"
grep 'msg=stopped' "$work/router.log" | sed 's/^.*msg=/  router: /'
echo "  cdc-router status:"
bin/cdc-router status | sed 's/^/    /'
[ "${written:-0}" = "${received:-0}" ] || fail "received ${received:-0} of the ${written:-0} events written"
