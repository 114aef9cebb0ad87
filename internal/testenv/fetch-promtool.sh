#!/usr/bin/env bash
# Fetches promtool (Prometheus's rule and exposition checker) from Debian's prometheus package without
# installing or starting Prometheus: the .deb is downloaded with apt-get download and only usr/bin/promtool
# is unpacked, into a cache shared between runs. Prints the path of promtool:
#
#   $(internal/testenv/fetch-promtool.sh) check rules deploy/prometheus/alerts.yml
#
# The cache is ${CDC_ROUTER_CACHE:-/var/cache/cdc-router}/promtool/<package version>; a version already
# unpacked there is not fetched again. A promtool on PATH is not used: the tests pin what they check with.
# Needs apt-get and dpkg-deb (Debian, Ubuntu); run as root (CI) or as a user who can write the cache.
set -euo pipefail

cache="${CDC_ROUTER_CACHE:-/var/cache/cdc-router}/promtool"
candidate() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ {print $2}'; }
version="$(candidate)"
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  # The package lists may never have been fetched on a fresh machine.
  if [ "$(id -u)" = 0 ]; then apt-get update -qq >/dev/null 2>&1 || true; fi
  version="$(candidate)"
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  # No apt answer at all: use what an earlier run cached, if anything.
  cached="$(ls -d "$cache"/*/promtool 2>/dev/null | sort | tail -n 1 || true)"
  if [ -n "$cached" ]; then echo "$cached"; exit 0; fi
  echo "fetch-promtool.sh: apt knows no prometheus package: add a Debian or Ubuntu repository that has it (apt-cache policy prometheus), or run as root so apt-get update can fetch the lists" >&2
  exit 1
fi

dest="$cache/$version"
if [ -x "$dest/promtool" ]; then
  echo "$dest/promtool"
  exit 0
fi
mkdir -p "$cache"
work="$(mktemp -d "$cache/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
if ! (cd "$work" && apt-get download -qq "prometheus=$version" >/dev/null 2>&1); then
  echo "fetch-promtool.sh: apt-get download prometheus=$version failed (is the Debian mirror reachable?)" >&2
  exit 1
fi
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
if [ ! -x "$work/root/usr/bin/promtool" ]; then
  echo "fetch-promtool.sh: the prometheus package $version has no usr/bin/promtool" >&2
  exit 1
fi
mkdir -p "$dest.tmp.$$"
cp "$work/root/usr/bin/promtool" "$dest.tmp.$$/promtool"
chmod 0755 "$dest.tmp.$$/promtool"
mv -T "$dest.tmp.$$" "$dest" 2>/dev/null || rm -rf "$dest.tmp.$$" # another run may have won the race
echo "$dest/promtool"
