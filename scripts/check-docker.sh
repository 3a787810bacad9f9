#!/usr/bin/env bash
# Checks docker/ without a Docker engine (none on the project's machines; nothing here builds or
# runs a container):
#   - docker/compose.yaml parses (python3 + PyYAML; a clear SKIP otherwise) and has the kafka
#     (KRaft), topics, route and dedup services; workers have no container_name or host ports;
#   - the topic-init job creates every topic the code uses by default (src/io/kafka/mod.rs);
#   - the route and dedup workers serve metrics on 0.0.0.0 (SIMDEDUP_METRICS_ADDR) and have a
#     healthcheck that probes GET /health without curl or wget (the runtime image has neither);
#     when target/release/simdedup exists, that probe is run outside Docker against a local
#     endpoint (ready: exit 0; nothing listening or a 503: exit 1);
#   - every SIMDEDUP_* variable in docker/ is one the CLI reads (`env = "..."` in src/app/);
#   - the Dockerfile is multi-stage, builds with --locked, copies config/, runs as a non-root
#     user and declares the state VOLUME.
# Exit 0 when every check that ran passed.
set -euo pipefail
cd "$(dirname "$0")/.."
fail=0
ok() { echo "ok    $*"; }
bad() { echo "FAIL  $*"; fail=1; }
skip() { echo "SKIP  $*"; }

compose=docker/compose.yaml dockerfile=docker/Dockerfile
probe=$(mktemp)
trap 'rm -f "$probe"' EXIT

# Topics the code uses: the *_topic defaults of KafkaConfig.
topics=$(sed -n '/^impl Default for KafkaConfig/,/^}/p' src/io/kafka/mod.rs |
  sed -n 's/^ *[a-z_]*_topic: "\([^"]*\)".*/\1/p')
[ -n "$topics" ] || bad "no topic defaults found in src/io/kafka/mod.rs"

if python3 -c 'import yaml' 2>/dev/null; then
  if PROBE_OUT=$probe python3 - "$compose" $topics <<'PY'
import os, sys, yaml
path, topics = sys.argv[1], sys.argv[2:]
fail = False
def check(cond, msg):
    global fail
    print(("ok    " if cond else "FAIL  ") + msg)
    fail |= not cond
doc = yaml.safe_load(open(path))
svc = doc.get("services", {})
check(True, f"{path} parses")
check({"kafka", "topics", "route", "dedup"} <= set(svc), "services kafka, topics, route, dedup present")
env = svc.get("kafka", {}).get("environment", {})
check("apache/kafka" in str(svc.get("kafka", {}).get("image", "")), "kafka uses the apache/kafka image")
check("controller" in str(env.get("KAFKA_PROCESS_ROLES", "")), "kafka runs in KRaft mode (process roles include controller)")
check("healthcheck" in svc.get("kafka", {}), "kafka has a healthcheck")
init = str(svc.get("topics", {}).get("command", "")) + str(svc.get("topics", {}).get("entrypoint", ""))
for t in topics:
    check(f" {t}:" in init or f"'{t}:" in init or f"\"{t}:" in init or f"{t}:" in init.split(), f"topic-init job creates {t}")
for name in ("route", "dedup"):
    s = svc.get(name, {})
    check("container_name" not in s, f"{name}: no container_name (scales with --scale)")
    check(not s.get("ports"), f"{name}: no fixed host ports")
    check(s.get("image") == "simdedup:latest" and "build" in s, f"{name}: builds and uses simdedup:latest")
    deps = s.get("depends_on", {})
    check(isinstance(deps, dict) and deps.get("topics", {}).get("condition") == "service_completed_successfully",
          f"{name}: waits for the topic-init job")
    shared = [v for v in s.get("volumes", []) if isinstance(v, str) and ":" in v and not v.startswith(("/", "."))]
    check(name != "dedup" or not shared, f"{name}: no named volume shared by scaled replicas")
    addr = str(s.get("environment", {}).get("SIMDEDUP_METRICS_ADDR", ""))
    check(addr.rsplit(":", 1)[0] in ("0.0.0.0", "[::]"), f"{name}: metrics on all interfaces (SIMDEDUP_METRICS_ADDR={addr})")
    hc = s.get("healthcheck", {})
    test = hc.get("test", [])
    probe = " ".join(test) if isinstance(test, list) else str(test)
    check(bool(test) and not hc.get("disable"), f"{name}: has a healthcheck")
    check("/health" in probe, f"{name}: healthcheck probes GET /health")
    check("curl" not in probe and "wget" not in probe, f"{name}: healthcheck needs no curl or wget")
    port = addr.rsplit(":", 1)[-1]
    check("SIMDEDUP_METRICS_ADDR" in probe or f"/{port}" in probe, f"{name}: healthcheck probes the metrics port ({port})")
if "healthcheck" in svc.get("dedup", {}):
    test = svc["dedup"]["healthcheck"]["test"]
    if isinstance(test, list) and test[:3] == ["CMD", "bash", "-c"]:
        # Compose's `$$` escape, undone: what the container runs.
        open(os.environ["PROBE_OUT"], "w").write(test[3].replace("$$", "$"))
sys.exit(1 if fail else 0)
PY
  then :; else fail=1; fi
else
  skip "python3 with PyYAML not available: $compose not parsed (pip install pyyaml to check it)"
  for t in $topics; do
    if grep -qE "(^|[ '\"])$t:[0-9]" "$compose"; then ok "topic-init job creates $t (text match)"; else bad "topic-init job does not create $t"; fi
  done
fi

# The workers' healthcheck command, run here with bash against local endpoints (no container).
bin=target/release/simdedup
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
if [ ! -s "$probe" ]; then
  skip "healthcheck probe not run: no bash healthcheck parsed from $compose"
elif [ ! -x "$bin" ]; then
  skip "healthcheck probe not run: no $bin (cargo build --release)"
else
  run_probe() { SIMDEDUP_METRICS_ADDR=0.0.0.0:$1 timeout 10 bash -c "$(cat "$probe")" 2>/dev/null; }
  port=$(free_port)
  if run_probe "$port"; then bad "healthcheck probe: exit 0 with nothing listening"; else ok "healthcheck probe: unhealthy with nothing listening"; fi
  # A ready endpoint: a file-mode dedup that keeps serving after its input.
  tmp=$(mktemp -d)
  "$bin" dedup --input tests/data/sample_posts.jsonl --unique-out "$tmp/u" --duplicates-out "$tmp/d" \
    --rejected-out "$tmp/r" --no-progress --metrics-addr "127.0.0.1:$port" --metrics-hold 2>"$tmp/log" &
  pid=$!
  for _ in $(seq 50); do grep -q 'serving metrics until' "$tmp/log" && break; sleep 0.1; done
  if run_probe "$port"; then ok "healthcheck probe: healthy on 200 ready"; else bad "healthcheck probe: not healthy on a ready endpoint"; fi
  kill -TERM "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true
  rm -rf "$tmp"
  # A not-ready endpoint: a one-shot server answering 503 like /health does while starting.
  port=$(free_port)
  python3 -c '
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(503); self.end_headers(); self.wfile.write(b"not ready: starting\n")
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).handle_request()' "$port" 2>/dev/null &
  pid=$!
  sleep 0.5
  if run_probe "$port"; then bad "healthcheck probe: exit 0 on a 503"; else ok "healthcheck probe: unhealthy on 503"; fi
  wait "$pid" 2>/dev/null || true
  rm -rf "$tmp"
fi

# SIMDEDUP_* variables: each one docker/ sets must be read by the CLI.
read_vars=$(grep -rhoE 'env = "SIMDEDUP_[A-Z_]+"' src/app | sed 's/env = "\(.*\)"/\1/' | sort -u)
for v in $(grep -hoE 'SIMDEDUP_[A-Z_]+' "$compose" "$dockerfile" | sort -u); do
  if grep -qx "$v" <<<"$read_vars"; then ok "$v is read by the CLI"; else bad "$v is set in docker/ but no CLI flag reads it"; fi
done

# Dockerfile.
froms=$(grep -cE '^FROM ' "$dockerfile")
[ "$froms" -ge 2 ] && ok "Dockerfile is multi-stage ($froms stages)" || bad "Dockerfile is not multi-stage"
grep -qE 'cargo build .*--locked' "$dockerfile" && ok "Dockerfile builds with --locked" || bad "Dockerfile: cargo build without --locked"
grep -qE '^COPY config ' "$dockerfile" && ok "Dockerfile copies config/" || bad "Dockerfile does not copy config/"
user=$(sed -n 's/^USER \(.*\)/\1/p' "$dockerfile" | tail -1)
[ -n "$user" ] && [ "$user" != root ] && [ "$user" != 0 ] && ok "Dockerfile runs as non-root user $user" || bad "Dockerfile runs as root"
# The worker healthcheck runs bash: essential in Debian, so in any debian/ubuntu runtime image.
runtime=$(grep -E '^FROM ' "$dockerfile" | tail -1 | awk '{print $2}')
case "$runtime" in
  debian:* | ubuntu:*) ok "runtime image $runtime has bash (the worker healthcheck needs it)" ;;
  *) bad "runtime image $runtime: bash not known to be there (the worker healthcheck needs it)" ;;
esac
grep -qE '^VOLUME ' "$dockerfile" && ok "Dockerfile declares a state VOLUME" || bad "Dockerfile has no VOLUME"
for p in Cargo.toml Cargo.lock src config; do
  grep -E '^COPY ' "$dockerfile" | grep -qw -- "$p" || bad "Dockerfile does not copy $p"
done
if [ -f .dockerignore ] && grep -qx target .dockerignore; then ok ".dockerignore keeps target/ out of the build context"; else bad ".dockerignore does not exclude target/"; fi

echo "not checked here (needs Docker): that the image builds, that the containers start, Kafka health,"
echo "  the worker healthchecks inside a container, scaling"
exit "$fail"
