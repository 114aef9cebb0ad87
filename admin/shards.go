package admin

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/cdc-router/cdc-router/migrations"
)

// Shard is one shard of a sharded outbox (migrate --shards N, run --shard I/N): its own slot and its own
// row-filtered publication.
type Shard struct {
	I, N        int
	Slot        string // migrations.ShardSlot of the base --slot
	Publication string // migrations.ShardPublication of the base --publication
}

// Name is the shard as --shard takes it, I/N.
func (s Shard) Name() string { return fmt.Sprintf("%d/%d", s.I, s.N) }

// NewShard is shard i of n of the base slot and publication.
func NewShard(slot, publication string, i, n int) Shard {
	return Shard{I: i, N: n, Slot: migrations.ShardSlot(slot, i, n), Publication: migrations.ShardPublication(publication, i, n)}
}

// Shards lists the shards of the base slot and publication found in this database: those whose
// publication (migrate --shards) or whose slot (a shard whose publication was dropped since) exists, ordered
// by N, then I. During a reshard two counts of shards exist side by side.
func Shards(ctx context.Context, conn *pgx.Conn, slot, publication string) ([]Shard, error) {
	rows, err := conn.Query(ctx, `SELECT pubname::text FROM pg_publication WHERE starts_with(pubname, $1)
		UNION SELECT slot_name::text FROM pg_replication_slots WHERE starts_with(slot_name, $2) AND database = current_database()`,
		publication+"_shard_", slot+"_shard_")
	if err != nil {
		return nil, fmt.Errorf("read the shards' publications and slots: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("read the shards' publications and slots: %w", err)
	}
	seen := map[[2]int]bool{}
	var out []Shard
	for _, name := range names {
		i, n, ok := migrations.ShardOf(name)
		base := strings.TrimSuffix(name, fmt.Sprintf("_shard_%d_of_%d", i, n))
		if !ok || (base != slot && base != publication) || i >= n || seen[[2]int{i, n}] {
			continue
		}
		seen[[2]int{i, n}] = true
		out = append(out, NewShard(slot, publication, i, n))
	}
	slices.SortFunc(out, func(a, b Shard) int {
		if a.N != b.N {
			return a.N - b.N
		}
		return a.I - b.I
	})
	return out, nil
}

// ResolveShard is the shard that --shard value names among the shards found (Shards): I/N as run takes
// it, or I alone when one count of shards exists. It refuses, naming the shards there are, a value out of
// range, a count of shards that was never created, and I alone when there is no or more than one count.
func ResolveShard(value string, found []Shard, slot, publication string) (Shard, error) {
	counts := shardCounts(found)
	if !strings.Contains(value, "/") {
		k, err := strconv.Atoi(strings.TrimSpace(value))
		switch {
		case err != nil:
			return Shard{}, fmt.Errorf("--shard %q is not a shard: write I/N (as run --shard takes it) or I alone", value)
		case len(counts) == 0:
			return Shard{}, fmt.Errorf("--shard %s: publication %s has no shards in this database (`cdc-router migrate "+
				"--shards N` creates them); without --shard, status and reset work on the unsharded slot %s", value, publication, slot)
		case len(counts) > 1:
			return Shard{}, fmt.Errorf("--shard %s is ambiguous: shards of %s exist (a reshard in progress); write "+
				"--shard %s/N with one of them", value, joinCounts(counts), value)
		}
		value = fmt.Sprintf("%d/%d", k, counts[0])
	}
	i, n, err := migrations.ParseShard(value)
	if err != nil {
		if len(counts) > 0 {
			err = fmt.Errorf("%w; this database has %s", err, describeShards(found))
		}
		return Shard{}, err
	}
	if !slices.Contains(counts, n) {
		what := "no shards (`cdc-router migrate --shards N` creates them)"
		if len(counts) > 0 {
			what = describeShards(found)
		}
		return Shard{}, fmt.Errorf("--shard %s: neither publication %s nor slot %s exists; this database has %s",
			value, migrations.ShardPublication(publication, i, n), migrations.ShardSlot(slot, i, n), what)
	}
	return NewShard(slot, publication, i, n), nil
}

// shardCounts are the distinct N of found, in order.
func shardCounts(found []Shard) []int {
	var counts []int
	for _, s := range found {
		if !slices.Contains(counts, s.N) {
			counts = append(counts, s.N)
		}
	}
	return counts
}

func joinCounts(counts []int) string {
	parts := make([]string, len(counts))
	for i, n := range counts {
		parts[i] = strconv.Itoa(n)
	}
	return strings.Join(parts, " and of ")
}

// describeShards names the shards of found per count: "shards 0/2 to 1/2 (--shard 0 to 1)".
func describeShards(found []Shard) string {
	var parts []string
	for _, n := range shardCounts(found) {
		var names []string
		for _, s := range found {
			if s.N == n {
				names = append(names, s.Name())
			}
		}
		parts = append(parts, "shards "+strings.Join(names, ", "))
	}
	return strings.Join(parts, "; ")
}

// ShardReport is one shard's report in the report of `status` without --shard.
type ShardReport struct {
	Shard
	Report Report
}

// StatusOfShards reads the report of every shard of found (Status, then CountPending with the shard's
// publication and messagePrefix).
func StatusOfShards(ctx context.Context, conn *pgx.Conn, found []Shard, schema, messagePrefix string) ([]ShardReport, error) {
	var out []ShardReport
	for _, s := range found {
		r, err := Status(ctx, conn, s.Slot, schema)
		if err != nil {
			return nil, fmt.Errorf("status of shard %s: %w", s.Name(), err)
		}
		CountPending(ctx, conn, &r, ResetOptions{Publication: s.Publication, MessagePrefix: messagePrefix})
		out = append(out, ShardReport{Shard: s, Report: r})
	}
	return out, nil
}

// shardsText is the shards section of the text report of the unsharded slot: one line per shard.
func shardsText(shards []ShardReport, slot string) string {
	if len(shards) == 0 {
		return ""
	}
	s := fmt.Sprintf("shards:           %d (%s), each with its own slot and publication; the report above is of "+
		"the unsharded slot %s; `status --shard I/N` shows one shard's in full\n", len(shards), describeShards(shardsOf(shards)), slot)
	for _, sh := range shards {
		s += fmt.Sprintf("shard %-11s %s\n", sh.Name()+":", sh.Report.summary())
	}
	return s
}

func shardsOf(rs []ShardReport) []Shard {
	out := make([]Shard, len(rs))
	for i, r := range rs {
		out[i] = r.Shard
	}
	return out
}

// summary is the report in one line: the slot, whether it streams, its lag, what waits in it and the
// stored position.
func (r Report) summary() string {
	s := "slot " + r.Slot
	switch {
	case r.SlotDatabase != "":
		return s + " belongs to database " + r.SlotDatabase
	case !r.SlotExists:
		s += " does not exist"
	default:
		switch {
		case r.Active:
			s += " streaming"
		case r.initial() != nil && r.initial().Running():
			s += " in its initial snapshot"
		case r.Locked:
			s += " not streaming, a router of it runs"
		default:
			s += " not streaming"
		}
		s += ", lag " + HumanBytes(r.LagBytes)
		switch {
		case r.Pending != nil && r.Pending.AtLeast:
			s += fmt.Sprintf(", at least %d events waiting", r.Pending.Events())
		case r.Pending != nil:
			s += fmt.Sprintf(", %d events waiting", r.Pending.Events())
		}
		if r.Invalidation != "" {
			s += ", invalidated: " + r.Invalidation
		}
	}
	if r.Stored == nil {
		return s + ", no stored position"
	}
	return s + ", stored position " + r.Stored.LSN.String()
}
