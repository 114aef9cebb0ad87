#!/usr/bin/env bash
# rabbitmq-cluster.sh: a throwaway three-node RabbitMQ cluster on this machine, beside the system broker
# (which keeps running on 5672). The cluster tests (make test-cluster) drive it; it works by hand as well.
#
#   rabbitmq-cluster.sh start            start nodes 1..3, cluster them, wait until all run (about 30 s)
#   rabbitmq-cluster.sh stop             stop every node and delete the cluster's directory
#   rabbitmq-cluster.sh stop-node N      stop node N gracefully (rabbitmqctl stop)
#   rabbitmq-cluster.sh kill-node N      SIGKILL node N's Erlang VM
#   rabbitmq-cluster.sh start-node N     start node N again; it rejoins the cluster from its own data
#   rabbitmq-cluster.sh urls             print the nodes' AMQP URLs, comma-separated
#   rabbitmq-cluster.sh status           rabbitmqctl cluster_status
#
# Node N is ${CLUSTER_PREFIX}N@localhost (default cdccluster) with AMQP on 127.0.0.1:$((PORT_BASE+N)) and Erlang
# distribution on $((DIST_BASE+N)) (defaults 5690 and 25690: 5691..5693, 25691..25693). Each node has its own
# RABBITMQ_CONFIG_FILE with its own listeners.tcp.default, since a system rabbitmq.conf that sets
# listeners.tcp.local = 127.0.0.1:5672 would win over RABBITMQ_NODE_PORT, an empty enabled-plugins file and
# its own data and log directories under CLUSTER_DIR (default /tmp/cdc-router-rabbitmq-cluster). All nodes
# share the Erlang cookie of the user they run as: as root they run as the rabbitmq user, whose HOME
# /var/lib/rabbitmq holds the cookie rabbitmqctl uses too, so `rabbitmqctl -n cdccluster1@localhost ...` works.
set -euo pipefail

PREFIX=${CLUSTER_PREFIX:-cdccluster}
PORT_BASE=${CLUSTER_PORT_BASE:-5690}
DIST_BASE=${CLUSTER_DIST_BASE:-25690}
DIR=${CLUSTER_DIR:-/tmp/cdc-router-rabbitmq-cluster}
NODES=3
SBIN=/usr/lib/rabbitmq/bin
[ -x "$SBIN/rabbitmq-server" ] || SBIN=$(dirname "$(command -v rabbitmq-server || echo /usr/sbin/rabbitmq-server)")

die() { echo "rabbitmq-cluster.sh: $*" >&2; exit 1; }
[ -x "$SBIN/rabbitmq-server" ] || die "rabbitmq-server not found: install RabbitMQ 3.10 or later (Debian: apt-get install rabbitmq-server)"
node() { echo "${PREFIX}$1@localhost"; }

# as runs a command as the user that owns the nodes (rabbitmq when we are root), with the environment given.
as() {
	if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then
		runuser -u rabbitmq -- env HOME=/var/lib/rabbitmq "$@"
	else
		env "$@"
	fi
}

ctl() { as "$SBIN/rabbitmqctl" -n "$(node "$1")" "${@:2}"; }

node_env() {
	local n=$1 d="$DIR/$(node "$1")"
	echo RABBITMQ_NODENAME="$(node "$n")" RABBITMQ_NODE_IP_ADDRESS=127.0.0.1 RABBITMQ_NODE_PORT=$((PORT_BASE + n)) \
		RABBITMQ_DIST_PORT=$((DIST_BASE + n)) RABBITMQ_MNESIA_BASE="$d/mnesia" RABBITMQ_LOG_BASE="$d/log" \
		RABBITMQ_CONFIG_FILE="$d/rabbitmq" RABBITMQ_ENABLED_PLUGINS_FILE="$d/enabled_plugins" \
		RABBITMQ_CONF_ENV_FILE="$d/rabbitmq-env.conf" RABBITMQ_PID_FILE="$d/pid" \
		RABBITMQ_ADVANCED_CONFIG_FILE="$d/advanced.config" ERL_EPMD_ADDRESS=127.0.0.1
}

prepare() {
	local n=$1 d="$DIR/$(node "$1")"
	mkdir -p "$d/mnesia" "$d/log"
	# Its own listener: listeners.tcp.default, and no listeners.tcp.local from the system file.
	cat >"$d/rabbitmq.conf" <<-EOF
		listeners.tcp.default = 127.0.0.1:$((PORT_BASE + n))
		loopback_users = none
		log.file.level = info
		log.console = false
		vm_memory_high_watermark.relative = 0.2
		disk_free_limit.absolute = 50MB
	EOF
	echo "[]." >"$d/enabled_plugins"
	echo "[]." >"$d/advanced.config"
	: >"$d/rabbitmq-env.conf"
	if [ "$(id -u)" = 0 ] && id rabbitmq >/dev/null 2>&1; then chown -R rabbitmq: "$DIR"; fi
}

start_node() {
	local n=$1 d="$DIR/$(node "$1")"
	[ -d "$d" ] || die "node $n was never set up: run start first"
	# shellcheck disable=SC2046 # node_env is a list of words without spaces
	as $(node_env "$n") ERL_FLAGS="-kernel inet_dist_use_interface {127,0,0,1}" \
		setsid "$SBIN/rabbitmq-server" >"$d/log/stdout" 2>&1 </dev/null &
}

wait_node() {
	local n=$1 deadline=$((SECONDS + ${2:-120}))
	until ctl "$n" await_startup --timeout 5 >/dev/null 2>&1; do
		[ $SECONDS -lt $deadline ] || die "node $(node "$n") did not start; see $DIR/$(node "$n")/log"
		sleep 1
	done
}

os_pid() { cat "$DIR/$(node "$1")/pid" 2>/dev/null || ctl "$1" eval 'list_to_integer(os:getpid()).' 2>/dev/null; }

stop_node() {
	local pid
	pid=$(os_pid "$1" || true)
	ctl "$1" stop >/dev/null 2>&1 || true
	if [ -n "$pid" ]; then
		for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.5; done
		kill -9 "$pid" 2>/dev/null || true
	fi
}

urls() {
	local out="" n
	for n in $(seq 1 $NODES); do out="$out${out:+,}amqp://guest:guest@127.0.0.1:$((PORT_BASE + n))/"; done
	echo "$out"
}

case "${1:-}" in
start)
	for n in $(seq 1 $NODES); do
		if ctl "$n" status >/dev/null 2>&1; then die "node $(node "$n") already runs: run stop first"; fi
	done
	rm -rf "$DIR"
	for n in $(seq 1 $NODES); do prepare "$n"; start_node "$n"; done
	for n in $(seq 1 $NODES); do wait_node "$n"; done
	for n in $(seq 2 $NODES); do
		ctl "$n" stop_app >/dev/null
		ctl "$n" join_cluster "$(node 1)" >/dev/null
		ctl "$n" start_app >/dev/null
	done
	ctl 1 await_online_nodes $NODES --timeout 60 >/dev/null 2>&1 || ctl 1 cluster_status
	urls
	;;
stop)
	for n in $(seq 1 $NODES); do stop_node "$n" & done
	wait
	rm -rf "$DIR"
	;;
stop-node) stop_node "${2:?node number}" ;;
kill-node)
	pid=$(os_pid "${2:?node number}") || die "node ${2} has no pid"
	kill -9 "$pid"
	;;
start-node)
	start_node "${2:?node number}"
	wait_node "$2"
	;;
urls) urls ;;
status) ctl 1 cluster_status ;;
*) sed -n '2,12p' "$0" >&2; exit 2 ;;
esac
