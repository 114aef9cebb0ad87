package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// RabbitMQNode is a RabbitMQ node of a test's own, beside the shared broker: its own node name, AMQP and
// distribution ports, and data, log and configuration files in a temporary directory, as
// rabbitmq-cluster.sh starts its nodes. A test may restart it and raise alarms on it (the randomized
// harness, chaos, does); the shared broker on 5672 is never touched. As root it runs as the rabbitmq user,
// whose Erlang cookie rabbitmqctl then uses too.
type RabbitMQNode struct {
	t          testing.TB
	name       string // node@localhost
	port, dist int
	dir        string // on this machine's file system (inside root, when root is set)
	root       string // the root directory the node runs in (chroot), "" for the machine's RabbitMQ
	sbin       string // as the node sees it
	cmd        *exec.Cmd
	exited     chan struct{} // closed when the VM started last exits
	conf       []string      // rabbitmq.conf lines of the test's, after the harness's own
}

// StartRabbitMQNode starts a node and waits until it accepts AMQP connections; the test's cleanup stops it
// and removes its directory. conf are rabbitmq.conf lines of the test's (max_message_size = 262144): they
// hold across restarts and crashes of the node, where a setting made by rabbitmqctl eval would not.
func StartRabbitMQNode(t testing.TB, conf ...string) *RabbitMQNode {
	t.Helper()
	return startNode(t, "", serverBin(t), conf)
}

// startNode starts a node of the RabbitMQ in sbin (inside root, when set), retrying on fresh ports.
func startNode(t testing.TB, root, sbin string, conf []string) *RabbitMQNode {
	t.Helper()
	var errs []string
	for attempt := 1; attempt <= 3; attempt++ {
		n, err := freshNode(t, root, sbin, conf)
		if err == nil {
			return n
		}
		// A start that fails (a port taken between choosing and binding, a VM that exits, a machine too
		// loaded to answer) is retried on fresh ports, name and data; its log goes to the test's output.
		errs = append(errs, err.Error())
		t.Logf("RabbitMQ node, attempt %d of 3: %v", attempt, err)
	}
	t.Fatalf("start a RabbitMQ node of the test's own: 3 attempts failed:\n%s", strings.Join(errs, "\n"))
	return nil
}

// serverBin is the directory of rabbitmq-server and rabbitmqctl.
func serverBin(t testing.TB) string {
	sbin := "/usr/lib/rabbitmq/bin"
	if _, err := os.Stat(filepath.Join(sbin, "rabbitmq-server")); err != nil {
		p, err := exec.LookPath("rabbitmq-server")
		if err != nil {
			t.Fatalf("rabbitmq-server not found: install RabbitMQ 3.10 or later (Debian: apt-get install rabbitmq-server)")
		}
		sbin = filepath.Dir(p)
	}
	return sbin
}

// freshNode starts a node on fresh ports.
func freshNode(t testing.TB, root, sbin string, conf []string) (*RabbitMQNode, error) {
	port, err := nodePort()
	if err != nil {
		return nil, err
	}
	dist, err := nodePort()
	if err != nil {
		return nil, err
	}
	return tryNode(t, root, sbin, port, dist, conf)
}

// tryNode prepares and starts one node on the given AMQP and distribution ports; on failure it stops the
// node, removes its directory and returns an error that carries the end of the node's logs.
func tryNode(t testing.TB, root, sbin string, port, dist int, conf []string) (*RabbitMQNode, error) {
	n := &RabbitMQNode{t: t, root: root, sbin: sbin, port: port, dist: dist, conf: conf}
	n.name = fmt.Sprintf("cdctest%d_%d@localhost", os.Getpid(), n.port)
	tmp := ""
	if root != "" {
		tmp = filepath.Join(root, "tmp")
	}
	dir, err := os.MkdirTemp(tmp, "cdc-router-rabbitmq-node-")
	if err != nil {
		return nil, err
	}
	n.dir = dir
	if err := n.prepare(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("prepare a RabbitMQ node: %v", err)
	}
	if err := n.start(); err != nil {
		err = fmt.Errorf("start RabbitMQ node %s (AMQP %d, distribution %d): %v\n%s", n.name, port, dist, err, n.logTail(15))
		n.stop()
		return nil, err
	}
	t.Cleanup(n.stop)
	return n, nil
}

// nodePort is a free port that is none of those RabbitMQ's tools take for themselves: epmd's 4369, the
// shared broker's 5672 and 25672, and the range rabbitmqctl's own distribution listens in (ctlDistMin..
// ctlDistMax, inside Linux's ephemeral range, where freePort draws from).
func nodePort() (int, error) {
	for i := 0; ; i++ {
		p, err := freePort()
		if err != nil || i == 20 {
			return p, err
		}
		if p != 4369 && p != 5672 && p != 25672 && (p < ctlDistMin || p > ctlDistMax) {
			return p, nil
		}
	}
}

// rabbitmqctl of a node listens on a distribution port of its own, the first free one of this range
// (RabbitMQ's default is 35672 to 35682: eleven concurrent calls, fewer when ephemeral connections hold
// some, would exhaust it).
const ctlDistMin, ctlDistMax = 35672, 35871

// logTail is the last lines of each of the node's log files, for an error that says why it did not start.
func (n *RabbitMQNode) logTail(lines int) string {
	files, _ := filepath.Glob(filepath.Join(n.dir, "log", "*"))
	var b strings.Builder
	for _, f := range files {
		if filepath.Base(f) == "erl_crash.dump" { // megabytes of VM state; the other logs say why
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil || len(data) == 0 {
			continue
		}
		ls := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(ls) > lines {
			ls = ls[len(ls)-lines:]
		}
		for i, l := range ls {
			if len(l) > 400 {
				ls[i] = l[:400] + " ..."
			}
		}
		fmt.Fprintf(&b, "--- the end of %s:\n%s\n", filepath.Base(f), strings.Join(ls, "\n"))
	}
	if b.Len() == 0 {
		return "(the node wrote no log)"
	}
	return b.String()
}

// URL is the node's AMQP URL (guest may connect from 127.0.0.1: loopback_users = none).
func (n *RabbitMQNode) URL() string { return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d/", n.port) }

// Addr is the node's AMQP address, for the routers' proxy.
func (n *RabbitMQNode) Addr() string { return fmt.Sprintf("127.0.0.1:%d", n.port) }

func (n *RabbitMQNode) prepare() error {
	for _, d := range []string{"mnesia", "log"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	files := map[string]string{
		"rabbitmq.conf": fmt.Sprintf("listeners.tcp.default = 127.0.0.1:%d\nloopback_users = none\nlog.file.level = info\n"+
			"log.console = false\nvm_memory_high_watermark.relative = %s\ndisk_free_limit.absolute = 50MB\n", n.port, watermark) +
			strings.Join(n.conf, "\n") + "\n",
		"enabled_plugins": "[].\n", "advanced.config": "[].\n", "rabbitmq-env.conf": "",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(n.dir, name), []byte(content), 0o644); err != nil {
			return err
		}
	}
	if u, err := n.runAs(); err == nil && u != nil {
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		return filepath.Walk(n.dir, func(p string, _ os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			return os.Chown(p, uid, gid)
		})
	}
	return nil
}

// watermark is the node's vm_memory_high_watermark; an alarm sets 0 and restores it.
const watermark = "0.4"

// runAs is the rabbitmq user when the harness runs as root (nil otherwise).
func (n *RabbitMQNode) runAs() (*user.User, error) {
	switch {
	case os.Getuid() != 0:
		return nil, nil
	case n.root != "":
		return rootUser(n.root, "rabbitmq")
	}
	return user.Lookup("rabbitmq")
}

// command runs prog of the node's sbin with the node's environment, as the rabbitmq user under root.
func (n *RabbitMQNode) command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	dir := n.inside(n.dir)
	env := []string{"RABBITMQ_NODENAME=" + n.name, "RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", n.port), fmt.Sprintf("RABBITMQ_DIST_PORT=%d", n.dist),
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"), "RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq"), "RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONF_ENV_FILE=" + filepath.Join(dir, "rabbitmq-env.conf"), "RABBITMQ_PID_FILE=" + filepath.Join(dir, "pid"),
		"RABBITMQ_ADVANCED_CONFIG_FILE=" + filepath.Join(dir, "advanced.config"), "ERL_EPMD_ADDRESS=127.0.0.1",
		"ERL_FLAGS=-kernel inet_dist_use_interface {127,0,0,1}",
		fmt.Sprintf("RABBITMQ_CTL_DIST_PORT_MIN=%d", ctlDistMin), fmt.Sprintf("RABBITMQ_CTL_DIST_PORT_MAX=%d", ctlDistMax)}
	full := append([]string{filepath.Join(n.sbin, prog)}, args...)
	var cmd *exec.Cmd
	if n.root != "" {
		return n.chrootCommand(ctx, env, full)
	}
	if u, err := n.runAs(); err == nil && u != nil {
		cmd = exec.CommandContext(ctx, "runuser", append([]string{"-u", u.Username, "--", "env", "HOME=" + u.HomeDir}, append(env, full...)...)...)
	} else {
		cmd = exec.CommandContext(ctx, "env", append(env, full...)...)
	}
	return cmd
}

// ctl runs rabbitmqctl against the node alone (-n) and returns its output.
func (n *RabbitMQNode) ctl(timeout time.Duration, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	out, err := n.command(ctx, "rabbitmqctl", append([]string{"-n", n.name}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// start starts the node's Erlang VM (again, from its own data) and waits until it accepts connections.
func (n *RabbitMQNode) start() error {
	log, err := os.OpenFile(filepath.Join(n.dir, "log", "stdout"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer log.Close()
	n.cmd = n.command(context.Background(), "rabbitmq-server")
	n.cmd.Stdout, n.cmd.Stderr = log, log
	n.cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := n.cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	n.exited = exited
	go func() { n.cmd.Wait(); close(exited) }()
	return n.await(2 * time.Minute)
}

// await waits until the application runs and an AMQP connection opens.
func (n *RabbitMQNode) await(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := n.ctl(15*time.Second, "await_startup", "--timeout", "10")
		if err == nil {
			var c *amqp.Connection
			if c, err = amqp.Dial(n.URL()); err == nil {
				c.Close()
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not up within %v: %v", timeout, err)
		}
		select {
		case <-n.exited:
			return fmt.Errorf("its Erlang VM exited (%v) before it accepted connections", n.cmd.ProcessState)
		case <-time.After(time.Second):
		}
	}
}

// RestartApp stops the RabbitMQ application of the node (every connection closes, the VM stays), waits
// d, and starts it again. It returns when the outage began (stop_app returned: rabbitmqctl itself takes
// seconds on a loaded machine) and ended (the node accepts connections again), and a note on the outcome.
func (n *RabbitMQNode) RestartApp(d time.Duration) (from, to time.Time, note string) {
	from = time.Now()
	out, err := n.ctl(time.Minute, "stop_app")
	if err != nil {
		return from, time.Now(), fmt.Sprintf("stop_app: %v: %s", err, out)
	}
	time.Sleep(d)
	if out, err := n.ctl(2*time.Minute, "start_app"); err != nil {
		note = fmt.Sprintf("start_app: %v: %s", err, out)
	}
	if err := n.await(time.Minute); err != nil {
		note = err.Error()
	}
	return from, time.Now(), note
}

// MemoryAlarm raises a memory alarm on the node (vm_memory_high_watermark 0: every publishing connection is
// blocked) for d, then restores the node's watermark. It returns when the alarm was raised (set returned)
// and lifted (restored), and a note on the outcome.
func (n *RabbitMQNode) MemoryAlarm(d time.Duration) (from, to time.Time, note string) {
	if out, err := n.ctl(time.Minute, "set_vm_memory_high_watermark", "0"); err != nil {
		return time.Now(), time.Now(), fmt.Sprintf("raise: %v: %s", err, out)
	}
	from = time.Now()
	time.Sleep(d)
	for i := 0; ; i++ {
		out, err := n.ctl(time.Minute, "set_vm_memory_high_watermark", watermark)
		if err == nil {
			return from, time.Now(), ""
		}
		if i == 4 {
			n.t.Errorf("RabbitMQ node %s keeps its memory alarm: %v: %s", n.name, err, out)
			return from, time.Now(), fmt.Sprintf("restore: %v: %s", err, out)
		}
		time.Sleep(time.Second)
	}
}

// stop stops the node and removes its directory; the VM is killed if it does not stop within 30 s.
func (n *RabbitMQNode) stop() {
	if _, err := n.ctl(30*time.Second, "stop"); err != nil && n.cmd != nil && n.cmd.Process != nil {
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL)
	}
	if b, err := os.ReadFile(filepath.Join(n.dir, "pid")); err == nil {
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil {
			for i := 0; i < 60 && syscall.Kill(pid, 0) == nil; i++ {
				time.Sleep(500 * time.Millisecond)
			}
			if syscall.Kill(pid, 0) == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	}
	os.RemoveAll(n.dir)
}

// Ctl runs rabbitmqctl against the node alone and fails the test if it fails; it returns the output.
func (n *RabbitMQNode) Ctl(args ...string) string {
	n.t.Helper()
	out, err := n.ctl(time.Minute, args...)
	if err != nil {
		n.t.Fatalf("rabbitmqctl -n %s %v: %v: %s", n.name, args, err, out)
	}
	return out
}

// RaiseMemoryAlarm raises a memory alarm on the node (vm_memory_high_watermark 0) and returns the func that
// lifts it (also at cleanup).
func (n *RabbitMQNode) RaiseMemoryAlarm() (lift func()) {
	n.t.Helper()
	n.Ctl("set_vm_memory_high_watermark", "0")
	lifted := false
	lift = func() {
		if !lifted {
			lifted = true
			n.Ctl("set_vm_memory_high_watermark", watermark)
		}
	}
	n.t.Cleanup(lift)
	return lift
}

// Restart starts the node's application again after a stop_app and waits until it accepts connections.
func (n *RabbitMQNode) Restart() {
	n.t.Helper()
	n.Ctl("start_app")
	if err := n.await(2 * time.Minute); err != nil {
		n.t.Fatalf("RabbitMQ node %s: %v", n.name, err)
	}
}

// TryCtl runs rabbitmqctl against the node alone and returns its output and error, for a caller that
// records a failure rather than failing the test (the randomized harness applies faults mid-run).
func (n *RabbitMQNode) TryCtl(timeout time.Duration, args ...string) (string, error) {
	return n.ctl(timeout, args...)
}

// Kill kills the node's Erlang VM with SIGKILL (no stop_app, nothing flushed beyond what the broker had
// written: a crash), waits d, and starts the node again from the same data directory. It returns when the
// VM was killed and when the node accepted connections again, and a note on the outcome.
func (n *RabbitMQNode) Kill(d time.Duration) (from, to time.Time, note string) {
	b, err := os.ReadFile(filepath.Join(n.dir, "pid"))
	if err != nil {
		return time.Now(), time.Now(), fmt.Sprintf("read the pid file: %v", err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return time.Now(), time.Now(), fmt.Sprintf("pid file: %v", err)
	}
	from = time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return from, time.Now(), fmt.Sprintf("kill %d: %v", pid, err)
	}
	for i := 0; i < 100 && syscall.Kill(pid, 0) == nil; i++ {
		time.Sleep(50 * time.Millisecond)
	}
	if n.cmd != nil && n.cmd.Process != nil {
		syscall.Kill(-n.cmd.Process.Pid, syscall.SIGKILL) // what the VM left of its process group (runuser)
	}
	time.Sleep(d)
	if err := n.start(); err != nil {
		note = err.Error()
	}
	return from, time.Now(), note
}

// AddUser creates a user of the node's with every permission on vhost "/" and returns the node's AMQP URL
// with its credentials.
func (n *RabbitMQNode) AddUser(name, password string) (string, error) {
	if out, err := n.ctl(time.Minute, "add_user", name, password); err != nil {
		return "", fmt.Errorf("add_user: %v: %s", err, out)
	}
	if out, err := n.ctl(time.Minute, "set_permissions", "-p", "/", name, ".*", ".*", ".*"); err != nil {
		return "", fmt.Errorf("set_permissions: %v: %s", err, out)
	}
	return fmt.Sprintf("amqp://%s:%s@127.0.0.1:%d/", name, password, n.port), nil
}
