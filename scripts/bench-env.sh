# Sourced (from the repository root) by kafka-check.sh, bench-live.sh, bench-backlog.sh,
# bench-restart.sh and bench-kafka.sh:
# `bench_bin` builds the release binary and sets $bin to it, or to SIMDEDUP_BENCH_BIN when set
# (another simdedup binary, to compare two builds side by side);
# `bench_start` does that, makes a work dir ($work; kept when SIMDEDUP_BENCH_KEEP=1), starts a
# tansu broker on SQLite in it and exports SIMDEDUP_BROKERS; on exit the processes in $pids are
# killed and the broker stopped.
bench_bin() {
  if [ -n "${SIMDEDUP_BENCH_BIN:-}" ]; then
    bin=$SIMDEDUP_BENCH_BIN
  else
    cargo build --release --locked -q
    bin=$PWD/target/release/simdedup
  fi
}

bench_start() {
  bench_bin
  work=$(mktemp -d)
  echo "work dir: $work" >&2
  export SIMDEDUP_RUN=$work/broker
  pids=()
  trap bench_cleanup EXIT
  line=$(bash scripts/broker.sh start --sqlite "$work/broker.db")
  eval "$line"
  export SIMDEDUP_BROKERS
}

bench_cleanup() {
  for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  bash scripts/broker.sh stop >/dev/null 2>&1 || true
  [ -n "${SIMDEDUP_BENCH_KEEP:-}" ] || rm -rf "$work"
}
