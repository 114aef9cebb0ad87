#!/usr/bin/env bash
# Runs the end-to-end tests against each supported server version and prints a table of version x test
# group with pass/fail. PostgreSQL binaries come from fetch-postgres.sh, RabbitMQ 4.0 from rabbitmq4.sh
# (both cached in ${CDC_ROUTER_CACHE:-/var/cache/cdc-router}, so only the first run fetches).
#
#   matrix.sh core   the core end-to-end tests (kill/restart, SIGTERM, broker cut, snapshot boundary,
#                    refusals, quorum queues, partitioned outbox, generated columns, a paused router's takeover, emitted events' authentication, reset's wait for transactions in flight and the docs'
#                    setup SQL) on PostgreSQL 14 and 18 (MATRIX_PG="14 17 18" adds 17), each against RabbitMQ 4.0;
#                    what CI runs among `make test`'s jobs (`make test-matrix` in `make ci`), about 8 minutes here
#   matrix.sh full   the whole e2e suite on PostgreSQL 14, 15, 16, 17 and 18 with the machine's
#                    RabbitMQ, then the whole suite on RabbitMQ 4.0 (`make test-versions`), over an hour
#
# MATRIX_PG="16" (say) picks other PostgreSQL versions. Without -race (GOFLAGS or MATRIX_FLAGS can add it): the race detector runs in `make test`; here the
# servers' behaviour is under test, and -race would double the time. The broker-wide tests (alarms,
# stop_app, max_message_size) start a RabbitMQ node of their own (the machine's RabbitMQ, 3.10 here), so
# they are not in `core` and, in `full`, do not run against RabbitMQ 4.0.
set -euo pipefail
cd "$(dirname "$0")/../.."
mode="${1:?usage: matrix.sh core|full|regex}"
here=internal/testenv
flags=(-p 1 -count=1 -timeout 30m ${MATRIX_FLAGS:-})

# The core tests, by group; each group is a -run alternation over e2e's tests.
groups=(
  "kill/restart=TestSIGKILLLosesNothing|TestPostgresCrashMidStreamLosesNothing"
  "SIGTERM=TestSIGTERMThenRestartHasNoDuplicates|TestShutdownTimeoutBoundsAStopWhileTheBrokerStalls"
  "broker cut=TestBrokerCutWithUnconfirmedWindowLosesNothing"
  "snapshot boundary=TestInitialSnapshotHasNoGapAndNoOverlap|TestSIGTERMDuringTheSnapshot"
  "refusals=TestSlotDroppedWhileStoppedIsRefused|TestPositionFromAnotherClusterIsRefused|TestResetAfterRefusalStartsOver|TestUnroutableEventIsParked|TestUnroutableQueueOfTheOtherTypeIsRefused|TestDroppedPublicationIsRefused"
  "stream, quorum queues=TestEveryEventArrivesInOrderWithItsProperties|TestQuorumQueueConsumerGetsEveryEvent"
  "consumer groups=TestShortConsumerGroupUnderFaults"
  "partitioned outbox=TestPartitionedInitialSnapshotAndStream|TestPartitionedAttachAndDropWhileStreaming|TestPartitionedPublicationWithoutViaRootIsRefused"
  "generated columns=TestGeneratedColumnRefusedBeforePostgres18|TestGeneratedColumnOnPostgres18"
  "paused router=TestPausedRouter"
  "inbox requests, router's rights, reserved headers=TestRunnerExpiredResolveIsNotCarriedOut|TestRunnerResolveRefusedWhenTheMissingVersionArrived|TestRunnerVersionArrivingAfterSkipIsFailed|TestInboxRequestsCommand|TestRouterRoleOpensPhysicalReplication|TestBackfillQuarantinesReservedHeaders"
  "emitted events, docs SQL=TestOnlyAuthorisedWritersPublishEmittedEvents|TestResetWaitsForTransactionsInFlight|TestMessagePrefixWithoutEmitKeyIsRefused|TestDocumentedSetupSQLRuns|TestDocumentedBrokerPermissions|TestEmitFunctionHardening|TestMessageFloodIsQuarantinedInBursts|TestEmitKeyRetirementWaitsForOpenAndPreparedTransactions|TestForgedMessagesOfTwoTransactionsAreBothStored"
)
core_regex() {
  local all=() g
  for g in "${groups[@]}"; do all+=("${g#*=}"); done
  local IFS='|'
  echo "^(${all[*]})\$"
}

# race_regex is the groups whose routers run every goroutine of the stream (publish, confirm, ack, stop,
# restart, the snapshot's hand-off) under the faults that interleave them; the refusal, partition, column
# and emitted-event groups exercise no goroutine these do not, and a race-built router doubles their time.
race_regex() {
  local all=() g
  for g in "${groups[@]}"; do
    case "${g%%=*}" in
      kill/restart|SIGTERM|"broker cut"|"snapshot boundary"|"stream, quorum queues") all+=("${g#*=}") ;;
    esac
  done
  local IFS='|'
  echo "^(${all[*]})\$"
}

results=()
failed=0
# run LABEL ENV... -- GO-TEST-ARGS...: runs go test, records per group (or per package) pass/fail.
run() {
  local label="$1"; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  local log
  log="$(mktemp)"
  local began=$SECONDS
  echo "=== $label: go test $*" >&2
  local rc=0
  env "${envs[@]}" go test -v "${flags[@]}" "$@" >"$log" 2>&1 || rc=$?
  grep -E '^(--- FAIL|FAIL|ok|panic:)' "$log" >&2 || true
  [ "$rc" = 0 ] || { failed=1; tail -n 60 "$log" >&2; }
  local g name tests verdict
  for g in "${groups[@]}"; do
    name="${g%%=*}" tests="${g#*=}"
    if grep -Eq -- "^\s*--- FAIL: ($tests)( |\$)" "$log"; then verdict=FAIL
    elif grep -Eq -- "^\s*--- PASS: ($tests)( |\$)" "$log"; then verdict=pass
    else continue
    fi
    results+=("$(printf '%-28s %-22s %s' "$label" "$name" "$verdict")")
  done
  local pkg
  while read -r verdict pkg _; do
    results+=("$(printf '%-28s %-22s %s' "$label" "package ${pkg#github.com/cdc-router/cdc-router/}" "$verdict")")
  done < <(grep -E '^(ok|FAIL)\s+github.com/' "$log" | awk '{print ($1=="ok"?"pass":"FAIL"), $2}')
  results+=("$(printf '%-28s %-22s %ss' "$label" "(time)" "$((SECONDS - began))")")
  rm -f "$log"
}

# regex: print the -run alternation of the core groups make test runs once more with race-built routers.
if [ "$mode" = regex ]; then race_regex; exit 0; fi

rmq4=$("$here/rabbitmq4.sh" start)
case "$mode" in
  core)
    for v in ${MATRIX_PG:-14 18}; do
      bin="$("$here/fetch-postgres.sh" "$v")"
      run "PostgreSQL $v + RabbitMQ 4.0" $rmq4 "CDC_ROUTER_TEST_PG_BIN=$bin" -- -run "$(core_regex)" ./e2e/ ./migrations/ ./inbox/runner/ ./cmd/cdc-router/
    done
    ;;
  full)
    for v in ${MATRIX_PG:-14 15 16 17 18}; do
      bin="$("$here/fetch-postgres.sh" "$v")"
      run "PostgreSQL $v" "CDC_ROUTER_TEST_PG_BIN=$bin" -- ./e2e/
    done
    run "RabbitMQ 4.0" $rmq4 -- ./...
    ;;
  *) echo "usage: matrix.sh core|full|regex" >&2; exit 2 ;;
esac

printf '\n%-28s %-22s %s\n' "versions" "test group" "result"
printf '%s\n' "${results[@]}"
exit "$failed"
