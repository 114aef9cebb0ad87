package testenv

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Postgres is a throwaway PostgreSQL cluster owned by one test binary.
type Postgres struct {
	Port  int
	extra []string // extra -c settings, after the defaults so they win
	dir   string
	bin   string
	cred  *syscall.Credential

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has exited
}

// StartPostgres creates and starts a cluster with wal_level=logical on a free port. Each setting
// ("name=value") overrides a default, e.g. "wal_level=replica". Call Close when done.
func StartPostgres(settings ...string) (*Postgres, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	return StartPostgresIn(bin, settings...)
}

// StartPostgresIn is StartPostgres with the server binaries in bin (see PostgresBin).
func StartPostgresIn(bin string, settings ...string) (*Postgres, error) {
	dir, err := os.MkdirTemp("", "cdc-router-pg-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{dir: dir, bin: bin}
	for _, kv := range settings {
		p.extra = append(p.extra, "-c", kv)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("running as root needs a postgres user to own the test cluster: %w", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		p.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			return nil, err
		}
	}
	data := filepath.Join(dir, "data")
	out, err := p.command("initdb", "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync").CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("initdb: %v: %s", err, out)
	}
	if p.Port, err = freePort(); err != nil {
		return nil, err
	}
	if err := p.Start(); err != nil {
		return nil, err
	}
	return p, nil
}

func pgBinDir() (string, error) {
	if d := os.Getenv("CDC_ROUTER_TEST_PG_BIN"); d != "" {
		return d, nil
	}
	if out, err := exec.Command("pg_config", "--bindir").Output(); err == nil {
		d := strings.TrimSpace(string(out))
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/initdb")
	if len(matches) > 0 {
		return filepath.Dir(matches[len(matches)-1]), nil
	}
	return "", fmt.Errorf("PostgreSQL server binaries not found: install postgresql (initdb, postgres) or set CDC_ROUTER_TEST_PG_BIN")
}

func (p *Postgres) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(p.bin, name), args...)
	cmd.Dir = p.dir
	if p.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: p.cred}
	}
	return cmd
}

// Start starts the server process (again, after Stop or Kill) and waits until it accepts connections.
func (p *Postgres) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	logf, err := os.OpenFile(filepath.Join(p.dir, "postgres.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	// fsync=off only risks the cluster on an OS crash; synchronous_commit stays on, so a commit the tests
	// saw survives the immediate stops that crash tests use. max_prepared_transactions lets tests PREPARE
	// TRANSACTION (reset waits for prepared ones); a standby gets the same value, as it must.
	cmd := p.command("postgres", "-D", filepath.Join(p.dir, "data"), "-p", strconv.Itoa(p.Port),
		"-k", p.dir, "-c", "listen_addresses=127.0.0.1", "-c", "wal_level=logical",
		"-c", "max_replication_slots=40", "-c", "max_wal_senders=40", "-c", "max_connections=200",
		"-c", "fsync=off", "-c", "full_page_writes=off", "-c", "max_prepared_transactions=10",
		"-c", "wal_sender_timeout=20s", "-c", "log_min_messages=warning")
	cmd.Args = append(cmd.Args, p.extra...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); logf.Close(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		c, err := pgx.Connect(ctx, p.URL("postgres"))
		cancel()
		if err == nil {
			c.Close(context.Background())
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("postgres did not accept connections within 30s; see %s", filepath.Join(p.dir, "postgres.log"))
}

// Stop shuts the server down: "fast" (SIGINT, a clean shutdown) or "immediate" (SIGQUIT, crash recovery
// at the next start, the slot goes back to its last checkpointed position).
func (p *Postgres) Stop(mode string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	sig := syscall.SIGINT
	if mode == "immediate" {
		sig = syscall.SIGQUIT
	}
	p.cmd.Process.Signal(sig)
	select {
	case <-p.exited:
	case <-time.After(30 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
	}
	// The postmaster is gone once its pid file is.
	for i := 0; i < 200; i++ {
		if _, err := os.Stat(filepath.Join(p.dir, "data", "postmaster.pid")); os.IsNotExist(err) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.cmd = nil
}

// Close stops the server and removes its files.
func (p *Postgres) Close() {
	p.Stop("immediate")
	os.RemoveAll(p.dir)
}

// URL is a postgres:// URL for database db as the superuser.
func (p *Postgres) URL(db string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", p.Port, db)
}

// NewDatabase creates an empty database for one test and returns its URL. Replication slots whose
// names start with the database name are dropped when the test ends, so no slot pins WAL afterwards.
func (p *Postgres) NewDatabase(t testing.TB) string {
	t.Helper()
	name := Name(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		t.Fatalf("connect to test cluster: %v", err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		t.Fatalf("create database %s: %v", name, err)
	}
	t.Cleanup(func() { p.dropSlots(name) })
	return p.URL(name)
}

func (p *Postgres) dropSlots(db string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, p.URL("postgres"))
	if err != nil {
		return
	}
	defer c.Close(ctx)
	for i := 0; i < 50; i++ {
		var left int
		err := c.QueryRow(ctx, `SELECT count(*) FROM pg_replication_slots WHERE database = $1`, db).Scan(&left)
		if err != nil || left == 0 {
			return
		}
		c.Exec(ctx, `SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE database = $1 AND active`, db)
		c.Exec(ctx, `SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = $1 AND NOT active`, db)
		time.Sleep(100 * time.Millisecond)
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Main is a TestMain body: it starts a cluster into *pg, runs the tests, removes the binaries Build made
// and exits with the tests' code.
func Main(m interface{ Run() int }, pg **Postgres) {
	p, err := StartPostgres()
	if err != nil {
		fmt.Fprintln(os.Stderr, "the tests need PostgreSQL:", err)
		os.Exit(1)
	}
	*pg = p
	code := m.Run()
	p.Close()
	RemoveBuilds()
	os.Exit(code)
}
