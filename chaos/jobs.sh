#!/usr/bin/env bash
# jobs.sh SEEDS JOBS BASE DURATION [extra -args...]: the long run of the randomized harness (make chaos
# JOBS=n). Seeds share nothing but the machine, and a seed's faults crash and restart its PostgreSQL, so
# parallel seeds need processes of their own: JOBS `go test` streams, each with its own cluster, split
# SEEDS consecutive seeds from BASE between them. Each stream's output goes to chaos-logs/; at the end it
# prints the wall time, every failed seed with the command that replays it, and the coverage summed over
# all streams.
set -u
seeds=$1 jobs=$2 base=$3 duration=$4
shift 4
go=${GO:-go}
[ -n "$base" ] || base=$(( $(date +%s%N) % 1000000 + 1000 ))
per=$(( (seeds + jobs - 1) / jobs ))
logs=chaos-logs/$(date +%Y%m%d-%H%M%S)-base$base
mkdir -p "$logs"
echo "chaos: $seeds seeds from $base in $jobs streams of up to $per; logs in $logs"
$go test -c -o "$logs/chaos.test" ./chaos/ || exit 1
began=$(date +%s)
pids=()
for ((j = 0; j < jobs; j++)); do
  first=$(( base + j * per ))
  n=$(( seeds - j * per < per ? seeds - j * per : per ))
  [ "$n" -gt 0 ] || break
  (cd chaos && exec "../$logs/chaos.test" -test.count=1 -test.v -test.timeout 0 -test.run '^TestChaos$' \
    -chaos.seeds="$n" -chaos.base="$first" -chaos.duration="$duration" "$@") >"$logs/stream-$j.log" 2>&1 &
  pids+=($!)
done
rc=0
for p in "${pids[@]}"; do wait "$p" || rc=1; done
wall=$(( $(date +%s) - began ))
ran=$(grep -h -- '--- \(PASS\|FAIL\): TestChaos/seed=' "$logs"/stream-*.log | wc -l)
failed=$(grep -h -- '--- FAIL: TestChaos/seed=' "$logs"/stream-*.log | sed 's/.*seed=\([0-9]*\).*/\1/' | sort -n | tr '\n' ' ')
printf 'chaos: %d seeds from %d ran in %dh%02dm%02ds in %d streams; failed: [%s]\n' "$ran" "$base" $((wall / 3600)) $((wall % 3600 / 60)) $((wall % 60)) "${#pids[@]}" "${failed% }"
for s in $failed; do echo "  replay: make chaos SEED=$s DURATION=$duration"; done
echo "coverage over all seeds:"
awk '/coverage over all seeds:/ {on = 1; next} on && $1 ~ /^(fault|feature|op|seen):/ && NF == 2 {sum[$1] += $2; next} on {on = 0}
  END {for (k in sum) printf "  %-36s %d\n", k, sum[k]}' "$logs"/stream-*.log | sort
exit $rc
