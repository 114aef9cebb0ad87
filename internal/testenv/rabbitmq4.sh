#!/usr/bin/env bash
# Prepares and starts RabbitMQ 4.0 beside the machine's own broker, for the version matrix:
#
#   env $(internal/testenv/rabbitmq4.sh start) go test ./cmd/cdc-router/
#
# RabbitMQ 4.0 is Debian 13 (trixie)'s rabbitmq-server. `start` builds a minimal trixie root holding it
# with debootstrap (about 80 s and 370 MB, once: the root is cached in
# ${CDC_ROUTER_CACHE:-/var/cache/cdc-router}/rabbitmq-4.0 between runs; debootstrap checks the archive's
# signatures against debian-archive-keyring), mounts /proc inside it, and runs the node there as
# rmq4@localhost with AMQP on 127.0.0.1:5673, distribution on 25673 and its own epmd on 4370, so that it
# shares nothing with a system RabbitMQ on 5672. The chroot sees its own /etc: the system's
# /etc/rabbitmq is not read. It prints the settings the test suite reads:
#
#   CDC_ROUTER_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:5673/
#   CDC_ROUTER_TEST_RABBITMQCTL=<cache>/rabbitmq-4.0/rabbitmqctl   (rabbitmqctl aimed at that node)
#   CDC_ROUTER_TEST_RABBITMQ_ROOT=<cache>/rabbitmq-4.0/root          (where testenv.StartRabbitMQNodeLikeBroker
#                                                                    starts a 4.0 node of a test's own)
#
# `stop` stops the node and unmounts /proc; `status` exits 0 when the node answers. Run as root
# (debootstrap, chroot and mount need it). Safe to run any number of times.
set -euo pipefail

cmd="${1:-start}"
cache="${CDC_ROUTER_CACHE:-/var/cache/cdc-router}/rabbitmq-4.0"
root="$cache/root"
mirror="${CDC_ROUTER_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
node=rmq4@localhost
port=5673
ctl="$cache/rabbitmqctl"

die() { echo "rabbitmq4.sh: $*" >&2; exit 1; }
amqp_up() { (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; }
settings() {
  echo "CDC_ROUTER_TEST_AMQP_URL=amqp://guest:guest@127.0.0.1:$port/"
  echo "CDC_ROUTER_TEST_RABBITMQCTL=$ctl"
  echo "CDC_ROUTER_TEST_RABBITMQ_ROOT=$root"
}

build_root() {
  [ "$(id -u)" = 0 ] || die "run as root: debootstrap, chroot and mount need it"
  if ! command -v debootstrap >/dev/null 2>&1; then
    echo "rabbitmq4.sh: installing debootstrap" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  fi
  echo "rabbitmq4.sh: building a Debian trixie root with rabbitmq-server in $root (once, about 80 s)" >&2
  mkdir -p "$cache"
  rm -rf "$root.partial"
  debootstrap --variant=minbase --include=rabbitmq-server trixie "$root.partial" "$mirror" >"$cache/debootstrap.log" 2>&1 ||
    { umount "$root.partial/proc" 2>/dev/null || true; die "debootstrap failed, see $cache/debootstrap.log"; }
  umount "$root.partial/proc" 2>/dev/null || true
  version="$(chroot "$root.partial" dpkg-query -W -f '${Version}' rabbitmq-server)"
  case "$version" in
    4.0.*) ;;
    *) die "trixie's rabbitmq-server is $version, not 4.0: pin the suite to what it now is" ;;
  esac
  echo "$version" >"$root.partial/.rabbitmq-version"
  rm -rf "$root"
  mv "$root.partial" "$root"
}

configure() {
  # Its own node name, ports and epmd; listeners.tcp.* replaces any default listener.
  cat >"$root/etc/rabbitmq/rabbitmq-env.conf" <<EOF
NODENAME=$node
NODE_IP_ADDRESS=127.0.0.1
NODE_PORT=$port
DIST_PORT=25673
SERVER_ADDITIONAL_ERL_ARGS="-kernel inet_dist_use_interface {127,0,0,1}"
export ERL_EPMD_PORT=4370
export ERL_EPMD_ADDRESS=127.0.0.1
EOF
  cat >"$root/etc/rabbitmq/rabbitmq.conf" <<EOF
listeners.tcp.default = 127.0.0.1:$port
loopback_users.guest = true
EOF
  grep -q '^127.0.0.1[[:space:]].*localhost' "$root/etc/hosts" 2>/dev/null || echo "127.0.0.1 localhost" >>"$root/etc/hosts"
  cat >"$ctl" <<EOF
#!/bin/sh
# rabbitmqctl of the RabbitMQ 4.0 node that internal/testenv/rabbitmq4.sh runs ($node, port $port).
exec chroot "$root" env ERL_EPMD_PORT=4370 /usr/sbin/rabbitmqctl -n $node "\$@"
EOF
  chmod a+rx "$ctl"
}

mount_proc() { mountpoint -q "$root/proc" || mount -t proc proc "$root/proc"; }

start() {
  if [ -x "$ctl" ] && "$ctl" -q ping >/dev/null 2>&1; then
    # The node runs. A broker-wide test may have stopped its application for a few seconds: wait for
    # it rather than start a second node.
    for _ in $(seq 1 60); do amqp_up && break; sleep 1; done
    amqp_up || { "$ctl" -q start_app >/dev/null && "$ctl" -q await_startup >/dev/null; }
    settings
    return
  fi
  amqp_up && die "127.0.0.1:$port answers but not as $node: stop whatever listens there"
  [ -f "$root/.rabbitmq-version" ] || build_root
  configure
  mount_proc
  echo "rabbitmq4.sh: starting RabbitMQ $(cat "$root/.rabbitmq-version") as $node on 127.0.0.1:$port" >&2
  setsid chroot "$root" env ERL_EPMD_PORT=4370 /usr/sbin/rabbitmq-server >>"$cache/server.log" 2>&1 </dev/null &
  for _ in $(seq 1 120); do amqp_up && break; sleep 1; done
  amqp_up || die "RabbitMQ 4.0 did not open 127.0.0.1:$port, see $cache/server.log and $root/var/log/rabbitmq/"
  "$ctl" -q await_startup >/dev/null
  settings
}

stop() {
  if [ -x "$ctl" ] && amqp_up; then "$ctl" -q stop >/dev/null || true; fi
  for _ in $(seq 1 30); do amqp_up || break; sleep 1; done
  # epmd of the chroot outlives the node; end it by the port it owns.
  pid="$(ss -Hltnp "sport = :4370" 2>/dev/null | sed -n 's/.*pid=\([0-9]*\).*/\1/p' | head -1)"
  [ -n "$pid" ] && kill "$pid" 2>/dev/null || true
  mountpoint -q "$root/proc" && umount "$root/proc" || true
}

case "$cmd" in
  start) start ;;
  stop) stop ;;
  status) amqp_up && "$ctl" -q ping >/dev/null 2>&1 ;;
  *) die "usage: rabbitmq4.sh start|stop|status" ;;
esac
