#!/usr/bin/env bash
# Installs and runs a local Kafka-compatible broker (tansu) for tests and demos. No Docker, no JVM:
# tansu is a Kafka-protocol broker written in Rust, built from crates.io. Needs cargo, python3, bash.
#
#   scripts/broker.sh install                 # build tansu into $SIMDEDUP_TOOLS (slow: 10-20 min on 2 cores, once)
#   scripts/broker.sh start [--sqlite FILE] [--port PORT]
#                                             # start in background; stdout: SIMDEDUP_BROKERS=127.0.0.1:PORT
#   scripts/broker.sh topics NAME:PARTITIONS [NAME:PARTITIONS ...]   # create topics (existing ones are fine)
#   scripts/broker.sh stop                    # stop the broker started by `start`
#   scripts/broker.sh status                  # "running pid P at ADDR" (exit 0) or "not running" (exit 1)
#   scripts/broker.sh env                     # SIMDEDUP_BROKERS=ADDR of the running broker
#
# From another script (two lines, so that `set -e` stops the caller when start fails;
# `eval "$(scripts/broker.sh start)"` alone would carry on with SIMDEDUP_BROKERS unset):
#   line=$(scripts/broker.sh start --sqlite "$tmp/broker.db"); eval "$line"; export SIMDEDUP_BROKERS
#   trap 'scripts/broker.sh stop' EXIT
#   scripts/broker.sh topics posts:4 posts.unique:4
#
# start picks a free port unless --port is given; restarting a sqlite broker with
# `start --sqlite FILE --port "${SIMDEDUP_BROKERS##*:}"` keeps the address, so running clients reconnect.
#
# `start` installs tansu first if needed, and always gives a new broker: one left running by an earlier
# `start` in the same run dir is stopped first (runs in parallel need their own SIMDEDUP_RUN). The
# default storage is in memory (gone on stop); with --sqlite FILE the log lives in FILE and survives
# a restart or kill -9.
#
# Known tansu 0.6.0 defects (measured with rdkafka 0.39):
#   memory storage: a fetch from an offset inside a record batch returns the NEXT batch, so a consumer
#     that resumes from a committed offset (restart, rebalance) silently skips the rest of that batch;
#     ListOffsets(latest), i.e. fetch_watermarks' high mark, is the last batch's base offset + 1;
#     ListOffsets(earliest) can answer the second batch's base offset, so a consumer told to start
#     at the beginning misses the first batch (1 of 16 output partitions in one run of
#     bench-live.sh 2: its low mark 4, its records from 0; `simdedup export` asks for offset 0); and
#     offsets_for_times always answers 0. Use --sqlite for any test that restarts or rebalances
#     consumers or reads watermarks: sqlite storage gets these right (offsets_for_times past the last
#     message answers 0, not End), but is slower (~90k msg/s produce, ~65k consume, vs ~500k/~125k).
#   memory storage: each fetch that finds new records in a partition lists every record batch the
#     partition holds (tansu-storage's DynoStore::fetch over object_store's in-memory list), so
#     its cost grows as the topic fills: after a minute at 2,000 posts/s a raw partition of
#     bench-live.sh held about 2,600 batches (scripts/topic-batches.py counts them).
#   both: a fetch is answered with at most 5 MiB (tansu-storage's FetchService caps max_bytes at
#     that, whatever fetch.max.bytes asks), filled with whole batches partition by partition and
#     ignoring max.partition.fetch.bytes: a backlog of 4.8 MB per partition (400,000 rumdect posts
#     in 8) arrives one partition per fetch, so an event-time merge that needs every partition's
#     first records (the route stage) waits about 0.25 s for the eighth.
#   both: no EndTxn, so Kafka transactions cannot commit or abort (commit_transaction fails with
#     "EndTxnRequest (KIP-98) not supported by broker").
#   both: every fetch, with records or without, is held for the consumer's whole fetch.wait.max.ms
#     (tansu-storage's FetchService sleeps out the wait after each pass), and each costs CPU per
#     partition fetched: one idle consumer with a 5 ms wait keeps the broker at about 31% of a core
#     on 1 partition and 85% on 8 (6% and 22% with a 50 ms wait; sqlite storage). Hence the stages'
#     short fetch waits (a hop costs a whole wait) and a broker busy with no traffic at all.
#   both: a member that dies (kill -9) is never removed from its group: after its session timeout
#     the survivors rejoin into the same generation, the dead member still its leader, and get their
#     old assignment back, so the dead member's partitions have no consumer until it (or a
#     replacement) joins. Measured with two dedup workers, one killed: 9 minutes without an owner.
#
# Environment:
#   SIMDEDUP_TOOLS        install root (default ~/.cache/simdedup-tools; binary in $SIMDEDUP_TOOLS/bin)
#   SIMDEDUP_RUN          run dir with pid, address and log (default /tmp/simdedup-broker)
#   SIMDEDUP_TANSU        use this tansu binary instead of installing one
#   SIMDEDUP_TANSU_PREBUILT  a tansu 0.6.0 binary built elsewhere with the same storage engines;
#                         `install` copies it instead of building (default ~/.local/tansu/bin/tansu, if present)
#   SIMDEDUP_BROKER_WAIT  seconds `start` waits for the broker to answer (default 30)
set -euo pipefail

TANSU_VERSION=0.6.0
TANSU_FEATURES=dynostore,libsql
tools=${SIMDEDUP_TOOLS:-$HOME/.cache/simdedup-tools}
run=${SIMDEDUP_RUN:-/tmp/simdedup-broker}
prebuilt=${SIMDEDUP_TANSU_PREBUILT:-$HOME/.local/tansu/bin/tansu}
marker=$tools/tansu-$TANSU_VERSION.installed
pidfile=$run/broker.pid
addrfile=$run/broker.addr
logfile=$run/broker.log

say() { echo "broker.sh: $*" >&2; }
die() { say "$*"; exit 1; }

tansu_bin() {
  if [ -n "${SIMDEDUP_TANSU:-}" ]; then echo "$SIMDEDUP_TANSU"; else echo "$tools/bin/tansu"; fi
}

# True if $1 is an executable that reports tansu $TANSU_VERSION built with the storage engines we need
# (`tansu --help` ends with a line "Storage engines: dynostore, libsql").
is_tansu_version() {
  [ -x "$1" ] || return 1
  local v engines f
  v=$("$1" --version 2>/dev/null) || return 1
  [ "$v" = "tansu $TANSU_VERSION" ] || return 1
  engines=$("$1" --help 2>/dev/null | grep '^Storage engines:') || return 1
  for f in ${TANSU_FEATURES//,/ }; do
    [[ "$engines" == *"$f"* ]] || return 1
  done
}

installed() {
  local bin
  bin=$(tansu_bin)
  if [ -n "${SIMDEDUP_TANSU:-}" ]; then is_tansu_version "$bin"; return; fi
  [ -f "$marker" ] && [ "$(cat "$marker")" = "tansu $TANSU_VERSION features $TANSU_FEATURES" ] &&
    is_tansu_version "$bin"
}

cmd_install() {
  if installed; then
    say "tansu $TANSU_VERSION already installed: $(tansu_bin)"
    return 0
  fi
  [ -z "${SIMDEDUP_TANSU:-}" ] || die "SIMDEDUP_TANSU=$SIMDEDUP_TANSU is not a tansu $TANSU_VERSION binary"
  mkdir -p "$tools/bin"
  rm -f "$marker"
  if [ "$(realpath -m "$prebuilt")" != "$(realpath -m "$tools/bin/tansu")" ] && is_tansu_version "$prebuilt"; then
    say "copying prebuilt tansu $TANSU_VERSION from $prebuilt (set SIMDEDUP_TANSU_PREBUILT=/nonexistent to build instead)"
    cp "$prebuilt" "$tools/bin/tansu.tmp"
    mv -f "$tools/bin/tansu.tmp" "$tools/bin/tansu"
  else
    command -v cargo >/dev/null || die "cargo not found: install Rust from https://rustup.rs"
    say "building tansu $TANSU_VERSION (features $TANSU_FEATURES) into $tools"
    say "this is slow: 10-20 minutes on 2 cores (~400 crates), once; the result is reused by later runs"
    local t0=$SECONDS
    cargo install tansu --version "$TANSU_VERSION" --features "$TANSU_FEATURES" --locked \
      --root "$tools" >&2 || die "cargo install tansu failed (see the cargo output above)"
    say "built in $((SECONDS - t0)) s"
  fi
  is_tansu_version "$tools/bin/tansu" || die "$tools/bin/tansu does not report version $TANSU_VERSION"
  echo "tansu $TANSU_VERSION features $TANSU_FEATURES" >"$marker"
  say "installed: $tools/bin/tansu ($("$tools/bin/tansu" --version))"
}

# True if process $1 exists and is not a zombie (a broker that died during `start` is our zombie child).
alive() {
  local st
  st=$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f1) || return 1
  [ -n "$st" ] && [ "$st" != Z ]
}

# Pid of the broker recorded in the run dir if that process is alive and is a tansu broker; else fails.
live_pid() {
  [ -f "$pidfile" ] || return 1
  local pid
  pid=$(cat "$pidfile" 2>/dev/null) || return 1
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  alive "$pid" || return 1
  # The pid may have been reused by an unrelated process since the broker died: check it is a broker
  # listening on the recorded address.
  local addr
  addr=$(cat "$addrfile" 2>/dev/null) || return 1
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF " broker --listener-url tcp://$addr " || return 1
  echo "$pid"
}

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()'
}

# Sends a Kafka ApiVersions v0 request and a Metadata v1 request to $1 (host:port); succeeds if both
# answer with no error and the metadata lists a broker at exactly $1 (the advertised address).
kafka_ready() {
  python3 - "$1" <<'PY'
import socket, struct, sys
host, port = sys.argv[1].rsplit(":", 1)
port = int(port)
def call(sock, api_key, version, corr, body):
    cid = b"simdedup-broker-sh"
    hdr = struct.pack(">hhih", api_key, version, corr, len(cid)) + cid
    msg = hdr + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    def recv(n):
        buf = b""
        while len(buf) < n:
            chunk = sock.recv(n - len(buf))
            if not chunk:
                raise EOFError("connection closed")
            buf += chunk
        return buf
    size, = struct.unpack(">i", recv(4))
    data = recv(size)
    got, = struct.unpack(">i", data[:4])
    if got != corr:
        raise ValueError("correlation id mismatch")
    return data[4:]
try:
    s = socket.create_connection((host, port), timeout=3)
    s.settimeout(3)
    r = call(s, 18, 0, 1, b"")                       # ApiVersions v0
    err, = struct.unpack(">h", r[:2])
    if err != 0:
        raise ValueError(f"ApiVersions error {err}")
    r = call(s, 3, 1, 2, struct.pack(">i", -1))      # Metadata v1, all topics
    n, = struct.unpack(">i", r[:4]); off = 4
    brokers = []
    for _ in range(n):
        node, hl = struct.unpack(">ih", r[off:off + 6]); off += 6
        h = r[off:off + hl].decode(); off += hl
        p, rl = struct.unpack(">ih", r[off:off + 6]); off += 6
        if rl > 0:
            off += rl
        brokers.append(f"{h}:{p}")
    if f"{host}:{port}" not in brokers:
        raise ValueError(f"metadata lists brokers {brokers}, not {host}:{port}")
except Exception as e:
    print(f"not ready: {e}", file=sys.stderr)
    sys.exit(1)
PY
}

cmd_stop() {
  local pid
  if ! pid=$(live_pid); then
    say "no broker running (run dir $run)"
    rm -f "$pidfile" "$addrfile"
    return 0
  fi
  say "stopping broker pid $pid"
  kill -TERM "$pid" 2>/dev/null || true
  local i
  for i in $(seq 1 100); do
    alive "$pid" || break
    sleep 0.1
  done
  if alive "$pid"; then
    say "broker pid $pid ignored SIGTERM for 10 s: sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do
      alive "$pid" || break
      sleep 0.1
    done
  fi
  if alive "$pid"; then die "broker pid $pid did not exit"; fi
  rm -f "$pidfile" "$addrfile"
  say "stopped"
}

cmd_start() {
  local storage=memory://tansu/ workdir=$run db= fixed_port=
  while [ $# -gt 0 ]; do
    case "$1" in
      --sqlite) [ $# -ge 2 ] || die "--sqlite needs a FILE"; db=$2; shift 2 ;;
      --sqlite=*) db=${1#--sqlite=}; shift ;;
      --port) [ $# -ge 2 ] || die "--port needs a PORT"; fixed_port=$2; shift 2 ;;
      --port=*) fixed_port=${1#--port=}; shift ;;
      *) die "start: unknown argument '$1' (usage: start [--sqlite FILE] [--port PORT])" ;;
    esac
  done
  [[ -z "$fixed_port" || "$fixed_port" =~ ^[0-9]+$ ]] || die "--port: not a number: $fixed_port"
  if [ -n "$db" ]; then
    # tansu resolves sqlite://NAME against its working directory (an absolute path is not possible),
    # so the broker runs in the database's directory.
    db=$(realpath -m "$db")
    [[ "$(basename "$db")" =~ ^[A-Za-z0-9._-]+$ ]] || die "--sqlite: file name must match [A-Za-z0-9._-]+"
    workdir=$(dirname "$db")
    mkdir -p "$workdir"
    storage="sqlite://$(basename "$db")"
  fi
  installed || cmd_install
  local bin
  bin=$(tansu_bin)
  mkdir -p "$run"
  if live_pid >/dev/null; then
    say "a broker from an earlier start is still running: stopping it first"
    cmd_stop
  fi
  rm -f "$pidfile" "$addrfile"
  local limit=${SIMDEDUP_BROKER_WAIT:-30} attempt port addr pid
  for attempt in 1 2 3; do
    port=${fixed_port:-$(free_port)}
    addr=127.0.0.1:$port
    say "starting tansu on $addr, storage $storage${db:+ ($db)}, log $logfile"
    # stdin/stdout/stderr all redirected: the broker must not hold the caller's $(...) pipe open.
    # tansu also reads a .env file from its working directory: run it in the run dir (or the db's).
    (cd "$workdir" && exec nohup "$bin" broker \
      --listener-url "tcp://$addr" \
      --advertised-listener-url "tcp://$addr" \
      --storage-engine "$storage" \
      </dev/null >"$logfile" 2>&1) &
    pid=$!
    echo "$pid" >"$pidfile"
    echo "$addr" >"$addrfile"
    local deadline=$((SECONDS + limit)) ready=
    while [ $SECONDS -lt $deadline ]; do
      alive "$pid" || break
      if kafka_ready "$addr" 2>/dev/null; then ready=1; break; fi
      sleep 0.2
    done
    if [ -n "$ready" ]; then
      say "broker pid $pid ready at $addr"
      echo "SIMDEDUP_BROKERS=$addr"
      return 0
    fi
    if alive "$pid"; then
      say "broker pid $pid did not answer Kafka requests within ${limit} s; last log lines:"
      tail -n 30 "$logfile" >&2 || true
      kafka_ready "$addr" || true
      cmd_stop
      exit 1
    fi
    wait "$pid" 2>/dev/null || true
    rm -f "$pidfile" "$addrfile"
    if grep -qiE 'address already in use|AddrInUse' "$logfile" && [ -z "$fixed_port" ] && [ "$attempt" -lt 3 ]; then
      say "port $port was taken meanwhile: retrying with another port"
      continue
    fi
    say "broker exited during startup; last log lines:"
    tail -n 30 "$logfile" >&2 || true
    exit 1
  done
}

cmd_topics() {
  [ $# -ge 1 ] || die "usage: topics NAME:PARTITIONS [NAME:PARTITIONS ...]"
  local addr
  live_pid >/dev/null || die "no broker running (run dir $run): run '$0 start' first"
  addr=$(cat "$addrfile")
  local bin spec name parts out
  bin=$(tansu_bin)
  for spec in "$@"; do
    [[ "$spec" =~ ^([A-Za-z0-9._-]+):([0-9]+)$ ]] || die "bad topic spec '$spec' (want NAME:PARTITIONS)"
    name=${BASH_REMATCH[1]}
    parts=${BASH_REMATCH[2]}
    [ "$parts" -ge 1 ] || die "topic $name: partitions must be >= 1"
    if out=$("$bin" topic create "$name" --partitions "$parts" --broker "tcp://$addr" 2>&1); then
      say "created topic $name with $parts partitions"
    elif grep -qiE 'TopicAlreadyExists|already exists' <<<"$out"; then
      local have
      have=$("$bin" topic list --broker "tcp://$addr" 2>/dev/null | python3 -c '
import json, sys
for t in json.load(sys.stdin):
    if t.get("name") == sys.argv[1]:
        print(len(t.get("partitions") or []))' "$name") || have=
      if [ -n "$have" ] && [ "$have" != "$parts" ]; then
        die "topic $name already exists with $have partitions, not $parts (tansu cannot change it: stop, delete the sqlite file or use a new topic)"
      fi
      say "topic $name already exists${have:+ ($have partitions)}"
    else
      say "creating topic $name failed:"
      echo "$out" >&2
      exit 1
    fi
  done
}

cmd_status() {
  local pid
  if pid=$(live_pid); then
    echo "running pid $pid at $(cat "$addrfile" 2>/dev/null || echo unknown) (log $logfile)"
  else
    echo "not running"
    return 1
  fi
}

cmd_env() {
  live_pid >/dev/null || die "no broker running (run dir $run)"
  echo "SIMDEDUP_BROKERS=$(cat "$addrfile")"
}

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; }

main() {
  [ $# -ge 1 ] || { usage; exit 2; }
  local sub=$1
  shift
  case "$sub" in
    install) cmd_install "$@" ;;
    start) cmd_start "$@" ;;
    stop) cmd_stop ;;
    topics) cmd_topics "$@" ;;
    status) cmd_status ;;
    env) cmd_env ;;
    -h|--help|help) usage ;;
    *) say "unknown subcommand '$sub'"; usage; exit 2 ;;
  esac
}

# One line: bash has read the whole file before anything runs, so editing this script while an
# install is running cannot derail it.
main "$@"; exit $?
