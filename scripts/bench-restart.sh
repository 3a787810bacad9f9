#!/usr/bin/env bash
# Restart of a dedup worker with local state, on a local tansu broker: `simdedup generate`
# writes POSTS posts (default 1,200,000, 90% of them unique, event times 20 per second, so all
# inside the 48 h window: about 1.1M index entries) into an 8-partition raw topic; one
# `run --role all --state-dir` decides them all and is stopped (SIGTERM, which checkpoints its
# state); it is then started again on the same state dir RUNS times (default 3), and each time
# one new post, newer than everything decided, is produced at launch. Prints the index entries
# the state holds, per restart the time from launch to the new post's output record (its Kafka
# timestamp), the worker's RSS once it has decided it, and the phases the worker's log names
# (state opened and restored, changelog tail read, partitions assigned to the dedup stage,
# routed partitions resumed idle), and the median.
#   scripts/bench-restart.sh [POSTS]
# Every worker is stopped 3 s after its last verdict, idle (past `kafka.idle_after_ms`).
# SIMDEDUP_RESTART_REUSE=DIR restarts on the state of an earlier run's work dir (kept with
# SIMDEDUP_BENCH_KEEP=1) instead of building a new one (POSTS is then ignored).
# SIMDEDUP_RESTART_OTHER=path/to/another/simdedup restarts, after the RUNS restarts of the binary
# built here, RUNS times with that one (say, an older build) on the same state, and reports each
# one's median; SIMDEDUP_BENCH_KEEP=1 keeps the work dir (logs, state); SIMDEDUP_RESTART_CONFIG is
# TOML appended to the worker's config.
set -euo pipefail
cd "$(dirname "$0")/.."
posts=${1:-1200000}
runs=${RUNS:-3}
other=${SIMDEDUP_RESTART_OTHER:-}
[ -z "$other" ] || [ -x "$other" ] || { echo "SIMDEDUP_RESTART_OTHER: $other is not an executable" >&2; exit 2; }
[[ $posts =~ ^[1-9][0-9]*$ && $runs =~ ^[1-9][0-9]*$ ]] || { echo "usage: [RUNS=N] $0 [POSTS]" >&2; exit 2; }
source scripts/bench-env.sh
bench_sqlite_only "$0"
reuse=${SIMDEDUP_RESTART_REUSE:-}
if [ -n "$reuse" ]; then
  [ -f "$reuse/entries" ] || { echo "$reuse holds no finished first run" >&2; exit 2; }
  # bench_start without a new work dir: the broker restarts on the kept database.
  cargo build --release --locked -q
  bin=$PWD/target/release/simdedup
  work=$(realpath "$reuse")
  export SIMDEDUP_RUN=$work/broker
  pids=()
  trap 'for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done; bash scripts/broker.sh stop >/dev/null 2>&1 || true' EXIT
  line=$(bash scripts/broker.sh start --sqlite "$work/broker.db")
  eval "$line"
  export SIMDEDUP_BROKERS
  posts=$(cat "$work/posts")
else
  bench_start
fi

cat > "$work/config.toml" <<'TOML'
[kafka]
group_id = "restart"
input_topic = "restart.posts"
routed_topic = "restart.routed"
unique_topic = "restart.unique"
duplicates_topic = "restart.duplicates"
rejected_topic = "restart.rejected"
changelog_topic = "restart.changelog"
routed_partitions = 8
TOML
printf '%s\n' "${SIMDEDUP_RESTART_CONFIG:-}" >> "$work/config.toml"

now_ms() { date +%s%3N; }
addr() { sed -n 's/.*metrics listening address=\([0-9.:]*\).*/\1/p' "$1" | head -1; }
metrics() { # log -> the worker's /metrics text (empty while the endpoint is not up)
  local a
  a=$(addr "$1")
  [ -z "$a" ] || curl -s "http://$a/metrics" || true
}
decided() { # log -> posts decided (unique, duplicate or rejected) by that worker so far
  metrics "$1" | awk '$1 ~ /^simdedup_posts_(unique|duplicate|rejected)_total($|\{)/ {n += $2}
    END {printf "%d\n", n}'
}
start() { # log [binary]
  "${2:-$bin}" run --role all --config "$work/config.toml" --state-dir "$work/state" \
    --metrics-addr 127.0.0.1:0 --log-level info,simdedup::io::kafka::dedup::owned=debug 2> "$1" &
  pid=$!
  pids=("$pid")
}
stop() {
  kill -TERM "$pid"
  wait "$pid" || { echo "worker exited with $?; its log ends:" >&2; tail -n 20 "$log" >&2; exit 1; }
  pids=()
}

if [ -z "$reuse" ]; then
  t=$(now_ms)
  "$bin" generate --count "$posts" --mix unique=0.9,exact=0.04,format=0.03,light=0.02,heavy=0.01 \
    --topic restart.posts --partitions 8 --brokers "$SIMDEDUP_BROKERS" >&2
  echo "produced $posts posts in $(( ($(now_ms) - t) / 1000 )) s" >&2

  log=$work/first.log
  t=$(now_ms)
  start "$log"
  last=0 since=0
  while :; do
    sleep 2
    n=$(decided "$log")
    [ "$n" -ge "$posts" ] && break
    if [ "$n" -gt "$last" ]; then last=$n since=0; else since=$((since + 2)); fi
    if [ "$since" -ge 120 ] || ! kill -0 "$pid" 2>/dev/null; then
      echo "the first run stalled at $n of $posts posts; its log ends:" >&2
      tail -n 20 "$log" >&2
      exit 1
    fi
  done
  entries=$(metrics "$log" | awk '$1 == "simdedup_index_entries" {print $2}')
  # The gauge is sampled, so it can lag the last verdicts: the restarts below report what
  # the state really held.
  echo "first run: $posts posts decided in $(( ($(now_ms) - t) / 1000 )) s, $entries index entries at the last metrics sample" >&2
  sleep 3
  stop
  echo "state dir: $(du -sh "$work/state" | cut -f1)" >&2
  echo "$posts" > "$work/posts"
  echo "$entries" > "$work/entries"
fi
entries=$(cat "$work/entries")

# The new posts are created a minute after the end of the generated stream (posts / 20 event
# seconds after its first post at 1700000000): newer than everything decided, as live posts are.
created=$((1700000000 + posts / 20 + 60))
binaries=("$bin")
[ -z "$other" ] || binaries+=("$(realpath "$other")")
results=()
# One binary's restarts, then the other's: each publishes progress markers the next restart
# reads, so alternating them would hand one binary's markers to the other.
for b in "${!binaries[@]}"; do
 for r in $(seq "$runs"); do
  log=$work/restart$r-$b.log
  probe="restart-probe-$r-$b-$RANDOM"
  t0=$(now_ms)
  start "$log" "${binaries[$b]}"
  printf '{"id":"%s","text":"重启之后的第%s条新微博，检查工作进程多快恢复判定","created_at":%s}\n' \
    "$probe" "$r" "$created" | "$bin" produce --topic restart.posts --input - 2>/dev/null
  for _ in $(seq 600); do
    [ "$(decided "$log")" -ge 1 ] && break
    sleep 0.1
  done
  [ "$(decided "$log")" -ge 1 ] || { echo "restart $r: no verdict after 60 s; log ends:" >&2; tail -n 20 "$log" >&2; exit 1; }
  rss=$(awk '$1 == "VmRSS:" {printf "%d", $2 / 1024}' "/proc/$pid/status")
  sleep 3
  stop
  restored=$(grep -o 'local state restored entries=[0-9]*' "$log" | head -n 1 | cut -d= -f2)
  [ -z "$restored" ] || entries=$restored
  out_ms=$(for topic in unique duplicates rejected; do
    "$bin" export --topic "restart.$topic" --idle-ms 1000 --timestamps --output - 2>/dev/null
  done | awk -F '\t' -v p="\"$probe\"" 'index($2, p) {print $1; exit}')
  [ -n "$out_ms" ] || { echo "restart $r: the new post's output was not found" >&2; exit 1; }
  secs=$(python3 -c "print(round(($out_ms - $t0) / 1000, 2))")
  phases=$(python3 - "$log" "$t0" <<'PY'
import re, sys, datetime
log, t0 = sys.argv[1], int(sys.argv[2])
out = []
for line in open(log, encoding="utf-8", errors="replace"):
    m = re.match(r"\x1b?\S*?(\d{4}-\d\d-\d\dT[\d:.]+Z)", line)
    if not m:
        continue
    ms = datetime.datetime.fromisoformat(m.group(1).replace("Z", "+00:00")).timestamp() * 1000
    for key, name in (("local state opened", "state opened"),
                      ("local state restored", "state restored"),
                      ("replicated index caught up", "changelog tail read"),
                      ("rebalance|topic=restart.routed|Assigned", "dedup assigned")):
        if all(k in line for k in key.split("|")) and name not in " ".join(out):
            out.append(f"{name} {(ms - t0) / 1000:.2f} s")
resumed = sum(1 for l in open(log, encoding="utf-8", errors="replace")
              if "resuming" in l and "idle_before=true" in l)
if any("resuming" in l for l in open(log, encoding="utf-8", errors="replace")):
    out.append(f"{resumed} partitions resumed idle")
print(", ".join(out))
PY
)
  echo "restart $r (${binaries[$b]}): new post decided $secs s after launch, RSS then $rss MB ($phases)"
  results+=("$b $secs")
 done
done
for b in "${!binaries[@]}"; do
  printf '%s\n' "${results[@]}" | awk -v b="$b" '$1 == b {print $2}' | sort -n |
    awk -v e="$entries" -v bin="${binaries[$b]}" '{a[NR]=$1} END {
      printf "restart with %s index entries (%s): median %s s over %d runs (min %s, max %s)\n",
        e, bin, a[int((NR + 1) / 2)], NR, a[1], a[NR] }'
done
