#!/usr/bin/env bash
# The first step of `npm test`: installs from Debian what the tests need and this machine lacks.
#   systemd      systemd-journald (namespace mode) and journalctl, for the journald tests
#   podman runc  the Podman run (test/e2e/podman.sh), on runc: crun fails here on setrlimit
#   debootstrap  the Podman run's local Node base image
#   strace       counting fsync calls (test/store/durability.test.ts, bench/path/trip.mjs --fsyncs)
#   chromium     the console's tests in a real browser (test/console/), driven by playwright-core
#   postgresql   the PostgreSQL store's tests, against 127.0.0.1:5432 as user postgres (trust)
#   promtool     Prometheus' checker of both programs' /metrics (test/metrics/): the binary
#                alone, unpacked from Debian's prometheus package, which installed would run a
#                Prometheus server
# With everything there it does nothing but make sure PostgreSQL is up: a cluster that is down
# is started with pg_ctlcluster, and the script waits (at most 30 s) until pg_isready answers.
# It installs as root: directly when run as root, else through sudo; without sudo it stops with
# one line naming the packages to install.
set -euo pipefail

stop() {
  echo "test/setup.sh: $*" >&2
  exit 1
}
as_root=()
if [ "$(id -u)" -eq 0 ]; then
  as_root=(env)
elif command -v sudo >/dev/null; then
  as_root=(sudo env)
fi

pg_up() { command -v pg_isready >/dev/null && pg_isready -q -h 127.0.0.1 -p 5432; }
# Debian's clusters: /etc/postgresql/<version>/main, the newest version if there are several
pg_version() { ls /etc/postgresql 2>/dev/null | sort -V | tail -n 1; }

missing=()
{ [ -x /lib/systemd/systemd-journald ] && command -v journalctl >/dev/null; } || missing+=(systemd)
for tool in podman runc debootstrap strace chromium; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
# PostgreSQL: already answering (whatever runs it), or a Debian cluster there is to start
installed_postgresql=0
if ! pg_up && ! { command -v pg_ctlcluster >/dev/null && [ -n "$(pg_version)" ]; }; then
  missing+=(postgresql)
  installed_postgresql=1
fi

if [ "${#missing[@]}" -gt 0 ]; then
  command -v apt-get >/dev/null || stop "no apt-get to install what the tests need: ${missing[*]}"
  [ "${#as_root[@]}" -gt 0 ] || stop "not root and no sudo: as root, run apt-get install ${missing[*]}"
  echo "test/setup.sh: installing ${missing[*]} from Debian" >&2
  "${as_root[@]}" apt-get update -qq
  "${as_root[@]}" DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi

if ! command -v promtool >/dev/null && command -v apt-get >/dev/null && [ "${#as_root[@]}" -gt 0 ]; then
  echo "test/setup.sh: installing promtool from Debian's prometheus package" >&2
  unpack=$(mktemp -d)
  (cd "$unpack" && "${as_root[@]}" apt-get download -qq prometheus 2>/dev/null ||
    { "${as_root[@]}" apt-get update -qq && "${as_root[@]}" apt-get download -qq prometheus; })
  "${as_root[@]}" dpkg-deb -x "$unpack"/prometheus_*.deb "$unpack/x"
  "${as_root[@]}" install -m 0755 "$unpack/x/usr/bin/promtool" /usr/local/bin/promtool
  "${as_root[@]}" rm -rf "$unpack"
fi

if [ "$installed_postgresql" -eq 1 ]; then
  # A cluster just made by the package: the tests' terms, on the loopback only (user postgres,
  # no password from 127.0.0.1, as on the CI machine). An existing cluster's settings are left
  # as they are.
  version=$(pg_version)
  [ -n "$version" ] || stop "the postgresql package made no cluster under /etc/postgresql"
  conf=/etc/postgresql/$version/main
  printf "listen_addresses = '127.0.0.1'\nport = 5432\n" |
    "${as_root[@]}" tee "$conf/conf.d/90-agent-gateway-tests.conf" >/dev/null
  "${as_root[@]}" sed -i '1i host all all 127.0.0.1/32 trust' "$conf/pg_hba.conf"
  "${as_root[@]}" pg_ctlcluster --skip-systemctl-redirect "$version" main stop 2>/dev/null || true
fi

if ! pg_up; then
  command -v pg_ctlcluster >/dev/null || stop "PostgreSQL does not answer at 127.0.0.1:5432 and there is no pg_ctlcluster to start it"
  [ "${#as_root[@]}" -gt 0 ] || stop "not root and no sudo: as root, run pg_ctlcluster --skip-systemctl-redirect $(pg_version) main start"
  echo "test/setup.sh: starting PostgreSQL $(pg_version)" >&2
  "${as_root[@]}" pg_ctlcluster --skip-systemctl-redirect "$(pg_version)" main start
  for _ in $(seq 60); do
    pg_up && break
    sleep 0.5
  done
  pg_up || stop "PostgreSQL $(pg_version) did not answer at 127.0.0.1:5432 within 30 s"
fi
