# Sourced (from the repository root) by kafka-check.sh, bench-live.sh, bench-backlog.sh,
# bench-restart.sh and bench-kafka.sh:
# `bench_bin` builds the release binary and sets $bin to it, or to SIMDEDUP_BENCH_BIN when set
# (another simdedup binary, to compare two builds side by side);
# `bench_start [TOPIC:PARTITIONS ...]` does that, makes a work dir ($work; kept when
# SIMDEDUP_BENCH_KEEP=1), starts a broker and exports SIMDEDUP_BROKERS; its pid is in
# $SIMDEDUP_RUN/broker.pid. On exit the processes in $pids are killed and the broker stopped.
# SIMDEDUP_BENCH_BROKER picks the broker: `tansu` (default; on SQLite in the work dir) or `mock`
# (`simdedup mock-broker`, librdkafka's in-memory mock cluster, whose fetches cost little: it
# serves no CreateTopics, so the script names every topic it uses as bench_start's arguments).
# SIMDEDUP_BENCH_STORAGE=memory runs tansu on its in-memory storage instead of SQLite: cheaper
# per fetch, but a consumer that resumes inside a record batch skips the rest of it
# (scripts/broker.sh), so scripts that restart or rebalance consumers refuse it
# (`bench_sqlite_only`).
bench_bin() {
  if [ -n "${SIMDEDUP_BENCH_BIN:-}" ]; then
    bin=$SIMDEDUP_BENCH_BIN
  else
    cargo build --release --locked -q
    bin=$PWD/target/release/simdedup
  fi
}

# Starts tansu on the storage SIMDEDUP_BENCH_STORAGE names (SQLite in DIR by default); prints
# SIMDEDUP_BROKERS=ADDR.
tansu_start() {
  case ${SIMDEDUP_BENCH_STORAGE:-sqlite} in
    sqlite) bash scripts/broker.sh start --sqlite "$1/broker.db" ;;
    memory) bash scripts/broker.sh start ;;
    *) echo "SIMDEDUP_BENCH_STORAGE: sqlite or memory, not '$SIMDEDUP_BENCH_STORAGE'" >&2; exit 2 ;;
  esac
}

# For scripts whose consumers restart or rebalance mid-stream: refuses tansu's memory storage.
bench_sqlite_only() {
  if [ "${SIMDEDUP_BENCH_BROKER:-tansu}" = tansu ] && [ "${SIMDEDUP_BENCH_STORAGE:-sqlite}" != sqlite ]; then
    echo "$1: tansu's memory storage skips records after a consumer restarts or rebalances" \
      "(scripts/broker.sh); unset SIMDEDUP_BENCH_STORAGE" >&2
    exit 2
  fi
}

bench_start() {
  bench_bin
  work=$(mktemp -d)
  echo "work dir: $work" >&2
  export SIMDEDUP_RUN=$work/broker
  pids=()
  trap bench_cleanup EXIT
  case ${SIMDEDUP_BENCH_BROKER:-tansu} in
    tansu)
      line=$(tansu_start "$work")
      eval "$line" ;;
    mock)
      [ $# -gt 0 ] || { echo "$0 runs on tansu only: unset SIMDEDUP_BENCH_BROKER" >&2; exit 2; }
      local t args=()
      for t in "$@"; do args+=(--topic "$t"); done
      mkdir -p "$SIMDEDUP_RUN"
      "$bin" mock-broker "${args[@]}" > "$SIMDEDUP_RUN/broker.addr" 2> "$SIMDEDUP_RUN/broker.log" &
      echo $! > "$SIMDEDUP_RUN/broker.pid"
      for _ in $(seq 100); do
        grep -q '^SIMDEDUP_BROKERS=' "$SIMDEDUP_RUN/broker.addr" && break
        kill -0 "$(cat "$SIMDEDUP_RUN/broker.pid")" 2>/dev/null ||
          { cat "$SIMDEDUP_RUN/broker.log" >&2; echo "the mock broker did not start" >&2; exit 1; }
        sleep 0.1
      done
      line=$(grep '^SIMDEDUP_BROKERS=' "$SIMDEDUP_RUN/broker.addr") ||
        { echo "the mock broker did not answer within 10 s" >&2; exit 1; }
      eval "$line" ;;
    *) echo "SIMDEDUP_BENCH_BROKER: tansu or mock, not '$SIMDEDUP_BENCH_BROKER'" >&2; exit 2 ;;
  esac
  export SIMDEDUP_BROKERS
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  # Reaped here, so that bash does not report each one as "Killed", which reads like a failure.
  # (Not with no pids: a bare `wait` would wait for the broker too.)
  [ "${#pids[@]}" -eq 0 ] || wait "${pids[@]}" 2>/dev/null || true
  if [ "${SIMDEDUP_BENCH_BROKER:-tansu}" = mock ]; then
    kill "$(cat "$SIMDEDUP_RUN/broker.pid" 2>/dev/null)" 2>/dev/null || true
  else
    bash scripts/broker.sh stop >/dev/null 2>&1 || true
  fi
  [ -n "${SIMDEDUP_BENCH_KEEP:-}" ] || rm -rf "$work"
}
