#!/usr/bin/env bash
# The first step of `npm test`: installs from Debian what the tests need and this machine lacks.
#   systemd      systemd-journald (namespace mode) and journalctl, for the journald tests
#   podman runc  the Podman run (test/e2e/podman.sh), on runc: crun fails here on setrlimit
#   debootstrap  the Podman run's local Node base image
#   strace       counting fsync calls (test/store/durability.test.ts, bench/trip.mjs --fsyncs)
# With everything there it does nothing. It installs as root: directly when run as root, else
# through sudo; without sudo it stops with one line naming the packages to install.
set -euo pipefail

missing=()
{ [ -x /lib/systemd/systemd-journald ] && command -v journalctl >/dev/null; } || missing+=(systemd)
for tool in podman runc debootstrap strace; do
  command -v "$tool" >/dev/null || missing+=("$tool")
done
[ "${#missing[@]}" -eq 0 ] && exit 0

stop() {
  echo "test/setup.sh: $*" >&2
  exit 1
}
command -v apt-get >/dev/null || stop "no apt-get to install what the tests need: ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  as_root=(env)
elif command -v sudo >/dev/null; then
  as_root=(sudo env)
else
  stop "not root and no sudo: as root, run apt-get install ${missing[*]}"
fi
echo "test/setup.sh: installing ${missing[*]} from Debian" >&2
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
