#!/usr/bin/env bash
# chaos/mutants.sh [mutant...]: does the randomized harness catch a broken router? (make mutants, issue 36)
#
# Each mutant is one small change of the router (below: a file, the text it replaces, exactly once, and the
# text put in its place), applied to a copy of the committed tree (git archive of REV, default HEAD) in a
# temporary directory, never to the working tree. The harness then runs the CI seeds (ciSeeds in
# chaos/chaos_test.go; MUTANT_SEEDS=a,b,c for others) against the mutated router, and the table at the end says,
# per mutant, which seeds killed it (failed) and by which invariants. A mutant that no seed kills is a
# router bug the harness would let through. `none` (not in the default list) runs the tree unchanged: a
# seed that fails there fails for another reason.
#
#   make mutants                          # the five mutants below, the CI seeds: about 3 min a mutant
#   make mutants MUTANTS="hold-removed" MUTANT_SEEDS=107,2026
#   chaos/mutants.sh none hold-removed
#
#   DRY=1 chaos/mutants.sh                # only check that each mutant still applies and builds
#   MUTANT_SEEDS=52,87 chaos/mutants.sh inbox-skipped-as-stale inbox-expired-taken   # the consumer's (inbox-requests)
#
# Logs: one per mutant in MUTANT_LOGS (default /tmp/cdc-mutants-<time>).
set -u
go=${GO:-go}
rev=${REV:-HEAD}
seeds=${MUTANT_SEEDS:-}
root=$(git rev-parse --show-toplevel) || exit 1
logs=${MUTANT_LOGS:-${TMPDIR:-/tmp}/cdc-mutants-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$logs"

all=(ack-on-receipt nack-as-confirm gap-check-off skip-first-transaction hold-removed)
inbox=(inbox-skipped-as-stale inbox-expired-taken) # not in the default list: no CI seed draws their kind
[ $# -gt 0 ] || set -- "${all[@]}"

# replace FILE OLD NEW: OLD must occur exactly once in FILE (relative to the copy), else the mutant is out of
# date with the router and the script says so rather than testing the unchanged code.
replace() {
  OLD=$2 NEW=$3 perl -0777 -i -pe '
    my ($o, $n) = ($ENV{OLD}, $ENV{NEW}); my $c = () = /\Q$o\E/g;
    die "'"$1"': the text to replace occurs $c times, want 1: update chaos/mutants.sh\n" if $c != 1;
    s/\Q$o\E/$n/;' "$1"
}

# mutate NAME: apply mutant NAME to the copy in the current directory.
mutate() {
  case $1 in
  none) ;;
  # The pause and the hot transaction (gen.FaultPause, gen.OpHot), not in the default list: no CI seed draws
  # them; run with MUTANT_SEEDS of seeds that do (docs/testing.md).
  fence-off) # no lease-fenced writes (ADR 0010): a router continued after a pause writes what it held
    replace replication/fence.go $'func (f *Fence) Check() error {\n\tif f == nil {\n' $'func (f *Fence) Check() error {\n\tif true || f == nil {\n' &&
      replace replication/fence.go $'func (f *Fence) Broken() error {\n\tif f == nil {\n' $'func (f *Fence) Broken() error {\n\tif true || f == nil {\n' ;;
  lease-off) # the walsender keeps the server's wal_sender_timeout (20 s in the harness's cluster), not --lease
    replace replication/stream.go $'\t\tif lease > 0 {\n\t\t\tif cfg.RuntimeParams == nil {\n' $'\t\tif false && lease > 0 {\n\t\t\tif cfg.RuntimeParams == nil {\n' ;;
  mark-prefix-only) # progress inside a transaction recorded as the gap-free prefix only (before issue 36's fix)
    replace offsets/mark.go $'\tm := markOf(s.key, seen, open)\n' $'\tm := markOf(s.key, seen, open)\n\tm.Seen, m.Open = m.Done, nil\n' ;;
  ack-on-receipt) # an event counts as confirmed (its LSN may be acknowledged) as soon as it is handed over
    replace route/router.go $'func (r *Router) Publish(ctx context.Context, ev cdc.Event, done func()) error {\n' \
      $'func (r *Router) Publish(ctx context.Context, ev cdc.Event, done func()) error {\n\tif done != nil {\n\t\tdone()\n\t\tdone = func() {}\n\t}\n' ;;
  nack-as-confirm) # a basic.nack on an open channel is taken for a confirm
    replace route/lane.go $'\tif !p.confirm.Acked() {\n' $'\tif !p.confirm.Acked() && l.ch.IsClosed() {\n' ;;
  gap-check-off) # the publication is never checked while streaming, and no change of it is recorded as a gap
    replace pubcheck/watch.go $'\tif time.Now().Before(w.next) {\n' $'\tif true || time.Now().Before(w.next) {\n' &&
      replace pubcheck/watch.go $'\tfor _, t := range changed {\n' $'\tfor _, t := range changed[:0] {\n' ;;
  skip-first-transaction) # each stream session resumes one transaction past the slot: its first one with
    # events is counted as confirmed and never published
    cat >replication/zz_mutant.go <<'EOF'
package replication

import (
	"sync"

	"github.com/cdc-router/cdc-router/internal/cdc"
)

var mutantFirst sync.Map // *session -> the commit LSN of its first transaction with events

func mutantSkip(s *session, lsn cdc.LSN) bool {
	v, loaded := mutantFirst.LoadOrStore(s, lsn)
	return !loaded || v.(cdc.LSN) == lsn
}
EOF
    replace replication/publish.go $'\ti := s.tracker.Add(x)\n\tcareful := s.net.careful(ev)\n' \
      $'\ti := s.tracker.Add(x)\n\tif mutantSkip(s, ev.CommitLSN) {\n\t\ts.tracker.ConfirmItem(x, i)\n\t\treturn nil\n\t}\n\tcareful := s.net.careful(ev)\n' ;;
  hold-removed) # no per-aggregate hold: every event is let through at once, --aggregate-window ignored
    replace route/hold.go $'func (h *holds) admit(e *held) verdict {\n\th.mu.Lock()\n\tdefer h.mu.Unlock()\n\ta := h.busy[e.agg]\n' \
      $'func (h *holds) admit(e *held) verdict {\n\th.mu.Lock()\n\tdefer h.mu.Unlock()\n\ta := h.busy[e.agg]\n\tif true {\n\t\ta.unconfirmed++\n\t\th.busy[e.agg] = a\n\t\treturn letThrough\n\t}\n' ;;
  # The consumer side (package inbox, which the harness runs in its own process for gen.CmdInboxRequests; no
  # CI seed draws that kind: run these with MUTANT_SEEDS of seeds that do, docs/testing.md):
  inbox-skipped-as-stale) # a version a resolve gave up that arrives afterwards is taken for a stale duplicate
    # (issue 35's loss: recorded stale, never applied, no failed record, no WARN)
    replace inbox/processor.go $'\t\tif v > baseline { // a version a resolve gave up' $'\t\tif false && v > baseline { // a version a resolve gave up' ;;
  inbox-expired-taken) # a runner takes a request whose command gave up waiting (expired): carried out later
    replace inbox/queries.go $'cancelled_at IS NULL\n\t\t\t\t  AND (expires_at IS NULL OR expires_at > now())\n' $'cancelled_at IS NULL\n' ;;
  *) echo "unknown mutant $1 (known: none ${all[*]} ${inbox[*]})" >&2; return 1 ;;
  esac
}

echo "mutants: $* on $(git -C "$root" rev-parse --short "$rev"), seeds ${seeds:-of ciSeeds}; logs in $logs"
declare -A result
for m in "$@"; do
  dir=$(mktemp -d "${TMPDIR:-/tmp}/cdc-mutant-$m-XXXXXX")
  log=$logs/$m.log
  began=$(date +%s)
  if ! git -C "$root" archive "$rev" | tar -x -C "$dir"; then
    result[$m]="not run: git archive failed"
  elif ! (cd "$dir" && mutate "$m") >"$log" 2>&1; then
    result[$m]="not run: $(tail -1 "$log")"
  elif ! (cd "$dir" && $go build -o /dev/null ./cmd/cdc-router) >>"$log" 2>&1; then
    result[$m]="not run: the mutant does not build (see $log)"
  elif [ -n "${DRY:-}" ]; then
    result[$m]="applies and builds (DRY: not run)"
  else
    (cd "$dir" && $go test -count=1 -v -timeout 0 -run '^TestChaos$' ./chaos/ -args ${seeds:+-chaos.seed=$seeds}) >>"$log" 2>&1
    killed="" survived=""
    for s in $(grep -o -- '--- FAIL: TestChaos/seed=[0-9]*' "$log" | sed 's/.*=//'); do
      # the invariants the seed broke: the lines "  <invariant>: ..." after "seed N broke K invariants:"
      inv=$(awk -v s="$s" '$0 ~ "seed " s " broke" {on = 1; next} on && /^ *[a-z-]+: / {sub(/^ */, ""); sub(/:.*/, ""); print; next} on {on = 0}' "$log" | sort -u | paste -sd, -)
      killed+="$s(${inv:-?}) "
    done
    for s in $(grep -o -- '--- PASS: TestChaos/seed=[0-9]*' "$log" | sed 's/.*=//'); do survived+="$s "; done
    result[$m]="killed by: ${killed:-none}; survived: ${survived:-none} ($(( $(date +%s) - began )) s)"
  fi
  rm -rf "$dir"
  echo "  $m: ${result[$m]}"
done
echo "mutants on $(git -C "$root" rev-parse --short "$rev"), seeds ${seeds:-of ciSeeds}:"
for m in "$@"; do printf '  %-24s %s\n' "$m" "${result[$m]}"; done
