package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// PostgresBin returns the bin folder of the pinned PostgreSQL server binaries of one major version (14 to
// 18), fetching and verifying them with fetch-postgres.sh beside this file when they are not cached yet.
func PostgresBin(major int) (string, error) {
	_, self, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(self), "fetch-postgres.sh")
	cmd := exec.Command("bash", script, strconv.Itoa(major))
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("%s %d: %v: %s", script, major, err, stderr.String())
	}
	return strings.TrimSpace(string(out)), nil
}

// StandbySlot is the physical slot the standby of a Pair streams through; the primary's
// synchronized_standby_slots names it.
const StandbySlot = "standby1"

// Pair is a PostgreSQL 17+ primary with one physical standby that synchronizes the primary's failover
// slots: the primary has wal_level=logical, hot_standby_feedback=on, the physical slot StandbySlot and
// synchronized_standby_slots naming it; the standby was made from a cold copy of the primary's data folder
// (standby.signal, primary_conninfo with dbname, primary_slot_name, sync_replication_slots=on,
// hot_standby_feedback=on).
type Pair struct {
	Primary, Standby *Postgres
}

// StartPair starts a primary from the binaries in bin with primarySettings ("name=value", e.g.
// "synchronous_standby_names=standby1") and a streaming standby of it. Call Close when done.
func StartPair(bin string, primarySettings ...string) (*Pair, error) {
	p, err := StartPostgresIn(bin, append([]string{"hot_standby_feedback=on"}, primarySettings...)...)
	if err != nil {
		return nil, err
	}
	pair := &Pair{Primary: p}
	if err := pair.makeStandby(); err != nil {
		pair.Close()
		return nil, err
	}
	return pair, nil
}

func (pr *Pair) makeStandby() error {
	p := pr.Primary
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var version int
	if err := queryRow(ctx, p.URL("postgres"), "SELECT current_setting('server_version_num')::int", &version); err != nil {
		return err
	}
	if version < 170000 {
		return fmt.Errorf("slot synchronization needs PostgreSQL 17 or later; %s is %d", p.bin, version)
	}
	var lsn *string
	if err := queryRow(ctx, p.URL("postgres"), "SELECT lsn::text FROM pg_create_physical_replication_slot($1, true)",
		&lsn, StandbySlot); err != nil {
		return fmt.Errorf("create the standby's physical slot: %w", err)
	}
	p.Stop("fast")
	dir, err := os.MkdirTemp("", "cdc-router-pg-standby-")
	if err != nil {
		return err
	}
	s := &Postgres{dir: dir, bin: p.bin, cred: p.cred}
	pr.Standby = s
	if s.cred != nil {
		if err := os.Chown(dir, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	// A cold copy of a cleanly stopped primary is a consistent base backup; cp -a keeps owner and modes.
	if out, err := exec.Command("cp", "-a", filepath.Join(p.dir, "data"), filepath.Join(dir, "data")).CombinedOutput(); err != nil {
		return fmt.Errorf("copy the primary's data folder: %v: %s", err, out)
	}
	for _, f := range []string{"postmaster.pid", "postmaster.opts"} {
		os.Remove(filepath.Join(dir, "data", f))
	}
	// Like pg_basebackup, leave the primary's slots behind: the standby's copies would be stale, and a
	// physical one would hold WAL on the promoted standby for ever.
	slots, _ := filepath.Glob(filepath.Join(dir, "data", "pg_replslot", "*"))
	for _, s := range slots {
		if err := os.RemoveAll(s); err != nil {
			return err
		}
	}
	signal := filepath.Join(dir, "data", "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return err
	}
	if s.cred != nil {
		if err := os.Chown(signal, int(s.cred.Uid), int(s.cred.Gid)); err != nil {
			return err
		}
	}
	if s.Port, err = freePort(); err != nil {
		return err
	}
	s.extra = []string{"-c", "hot_standby_feedback=on", "-c", "sync_replication_slots=on",
		"-c", "primary_slot_name=" + StandbySlot,
		"-c", fmt.Sprintf("primary_conninfo=host=127.0.0.1 port=%d user=postgres dbname=postgres application_name=%s",
			p.Port, StandbySlot)}
	p.extra = append(p.extra, "-c", "synchronized_standby_slots="+StandbySlot)
	if err := p.Start(); err != nil {
		return err
	}
	if err := s.Start(); err != nil {
		return err
	}
	return pr.waitStreaming(ctx)
}

// waitStreaming waits until the primary sees the standby streaming.
func (pr *Pair) waitStreaming(ctx context.Context) error {
	for {
		var n int
		err := queryRow(ctx, pr.Primary.URL("postgres"),
			"SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", &n, StandbySlot)
		if err == nil && n == 1 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the standby did not stream from the primary within 30 s (%v); see %s and %s", err,
				filepath.Join(pr.Primary.dir, "postgres.log"), filepath.Join(pr.Standby.dir, "postgres.log"))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Promote makes the standby a primary (pg_promote, waiting until it is done).
func (pr *Pair) Promote() error {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var ok bool
	if err := queryRow(ctx, pr.Standby.URL("postgres"), "SELECT pg_promote(true, 60)", &ok); err != nil {
		return fmt.Errorf("promote the standby: %w", err)
	}
	if !ok {
		return fmt.Errorf("the standby was not promoted within 60 s; see %s", filepath.Join(pr.Standby.dir, "postgres.log"))
	}
	return nil
}

// URL is a multi-host URL for database db naming the primary first and the standby second, with
// target_session_attrs=primary: it reaches whichever of the two is the primary.
func (pr *Pair) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d,127.0.0.1:%d/%s?sslmode=disable&target_session_attrs=primary",
		pr.Primary.Port, pr.Standby.Port, db)
}

// Log returns the tail of both servers' logs, for a failing test.
func (pr *Pair) Log(lines int) string {
	var b strings.Builder
	for _, p := range []*Postgres{pr.Primary, pr.Standby} {
		if p == nil {
			continue
		}
		out, _ := os.ReadFile(filepath.Join(p.dir, "postgres.log"))
		parts := strings.Split(strings.TrimRight(string(out), "\n"), "\n")
		if len(parts) > lines {
			parts = parts[len(parts)-lines:]
		}
		fmt.Fprintf(&b, "--- %s (port %d)\n%s\n", filepath.Join(p.dir, "postgres.log"), p.Port, strings.Join(parts, "\n"))
	}
	return b.String()
}

// Close stops both servers and removes their files.
func (pr *Pair) Close() {
	for _, p := range []*Postgres{pr.Standby, pr.Primary} {
		if p != nil {
			p.Close()
		}
	}
}

func queryRow(ctx context.Context, url, sql string, dest any, args ...any) error {
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer c.Close(context.Background())
	return c.QueryRow(ctx, sql, args...).Scan(dest)
}
