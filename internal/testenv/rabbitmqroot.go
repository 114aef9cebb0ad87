package testenv

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strings"
	"testing"
)

// rabbitmqRootVar names a root directory that holds another RabbitMQ than the machine's: rabbitmq4.sh's
// Debian trixie root with RabbitMQ 4.0, which `rabbitmq4.sh start` prints beside the broker's URL.
const rabbitmqRootVar = "CDC_ROUTER_TEST_RABBITMQ_ROOT"

// StartRabbitMQNodeLikeBroker is StartRabbitMQNode of the suite's broker's RabbitMQ: inside the root
// CDC_ROUTER_TEST_RABBITMQ_ROOT names when it is set (so under `env $(internal/testenv/rabbitmq4.sh start)`,
// as in the version matrix, the node is RabbitMQ 4.0, in the chroot, with ports, name and data of its own;
// the matrix's node on 5673 is not touched), else the machine's RabbitMQ. A test that restarts its broker
// and runs in the matrix starts its node with it, so that the matrix runs the version it names.
func StartRabbitMQNodeLikeBroker(t testing.TB, conf ...string) *RabbitMQNode {
	t.Helper()
	root := os.Getenv(rabbitmqRootVar)
	if root == "" {
		return StartRabbitMQNode(t, conf...)
	}
	const sbin = "/usr/lib/rabbitmq/bin" // Debian's, as the node sees it
	if _, err := os.Stat(filepath.Join(root, sbin, "rabbitmq-server")); err != nil {
		t.Fatalf("%s=%s holds no RabbitMQ (%v): run internal/testenv/rabbitmq4.sh start, which builds it", rabbitmqRootVar, root, err)
	}
	if _, err := os.Stat(filepath.Join(root, "proc", "self")); err != nil {
		t.Fatalf("%s=%s has no /proc mounted, which RabbitMQ needs: run internal/testenv/rabbitmq4.sh start, which mounts it", rabbitmqRootVar, root)
	}
	if os.Getuid() != 0 {
		t.Fatalf("%s is set: a node in that root is started with chroot, which needs root", rabbitmqRootVar)
	}
	return startNode(t, root, sbin, conf)
}

// inside is path p of this machine's file system as the node sees it (below its root, if it has one).
func (n *RabbitMQNode) inside(p string) string {
	if n.root == "" {
		return p
	}
	rel, err := filepath.Rel(n.root, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return p
	}
	return "/" + rel
}

// chrootCommand runs full (a program of the root's RabbitMQ and its arguments) inside the node's root as
// the root's rabbitmq user, whose home holds the Erlang cookie that the node and its rabbitmqctl share.
func (n *RabbitMQNode) chrootCommand(ctx context.Context, env, full []string) *exec.Cmd {
	u, err := n.runAs()
	if err != nil {
		n.t.Fatalf("RabbitMQ node in %s: %v", n.root, err)
	}
	args := []string{"--userspec=" + u.Uid + ":" + u.Gid, n.root, "env", "HOME=" + u.HomeDir}
	return exec.CommandContext(ctx, "chroot", append(args, append(env, full...)...)...)
}

// rootUser reads user name from root's /etc/passwd: the root's ids need not be this machine's.
func rootUser(root, name string) (*user.User, error) {
	f, err := os.Open(filepath.Join(root, "etc", "passwd"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Split(s.Text(), ":")
		if len(fields) >= 6 && fields[0] == name {
			return &user.User{Username: name, Uid: fields[2], Gid: fields[3], HomeDir: fields[5]}, nil
		}
	}
	return nil, fmt.Errorf("no user %s in %s/etc/passwd", name, root)
}
