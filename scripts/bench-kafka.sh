#!/usr/bin/env bash
# Throughput of `simdedup run --role all` against a local tansu broker, next to a pass-through
# baseline (`simdedup passthrough`: consume and produce the same records unchanged, same client
# settings), measured in the same run on the same input. Rates come from the workers' logs: from
# the first partition assignment to the last `progress` line (every 10,000 records), so process
# start-up and the drain at the end are excluded.
#   scripts/bench-kafka.sh [POSTS.jsonl] [COPIES]
# Default input: ../shared/bench/weibo-dev-small/posts.jsonl, 2 copies (made by scripts/copies.py).
# Environment:
#   SIMDEDUP_BENCH_STORAGE=memory      tansu's in-memory storage instead of SQLite;
#   SIMDEDUP_BENCH_BASELINE=confluent  the baseline is scripts/passthrough.py, a confluent-kafka
#                                      (Python) loop, installed with pip into target/bench-venv;
#   SIMDEDUP_BENCH_BIN=PATH            another simdedup binary instead of this checkout's build.
# For example the 400,000 oldest rumdect posts on memory storage against confluent-kafka:
#   python3 scripts/rumdect.py 400000 > out/rumdect400k.jsonl
#   SIMDEDUP_BENCH_STORAGE=memory SIMDEDUP_BENCH_BASELINE=confluent \
#     scripts/bench-kafka.sh out/rumdect400k.jsonl 1
set -euo pipefail
cd "$(dirname "$0")/.."
input=${1:-../shared/bench/weibo-dev-small/posts.jsonl}
copies=${2:-2}
source scripts/bench-env.sh
bench_bin
work=$(mktemp -d)
echo "work dir: $work" >&2
export SIMDEDUP_RUN=$work/broker
trap 'bash scripts/broker.sh stop >/dev/null 2>&1 || true; [ -n "${SIMDEDUP_BENCH_KEEP:-}" ] || rm -rf "$work"' EXIT
baseline=${SIMDEDUP_BENCH_BASELINE:-simdedup}
line=$(tansu_start "$work")
case $baseline in
  simdedup) ;;
  confluent)
    venv=$PWD/target/bench-venv
    if ! "$venv/bin/python" -c 'import confluent_kafka' 2>/dev/null; then
      python3 -m venv "$venv"
      "$venv/bin/pip" install -q 'confluent-kafka==2.*'
    fi ;;
  *) echo "SIMDEDUP_BENCH_BASELINE: simdedup or confluent, not '$baseline'" >&2; exit 2 ;;
esac
eval "$line"
python3 scripts/copies.py "$input" "$copies" > "$work/stream.jsonl"
n=$(wc -l < "$work/stream.jsonl")
"$bin" produce --brokers "$SIMDEDUP_BROKERS" --topic bench.posts --partitions 8 --input "$work/stream.jsonl"
rate() { # log file, mode -> records/s
  # stage: between the first and the last progress line (the deciding stage's own pace);
  # end-to-end: from the first partition assignment to the last progress line, so a stage that
  # drains a backlog its upstream stage built up does not count faster than the pipeline.
  python3 - "$1" "$2" <<'PY'
import re, sys, datetime
pts, first = [], None
for l in open(sys.argv[1], encoding="utf-8", errors="replace"):
    l = re.sub(r"\x1b\[[0-9;]*m", "", l)
    m = re.search(r"^(\S+)Z .*progress.*records=(\d+)", l)
    if m:
        pts.append((datetime.datetime.fromisoformat(m.group(1)), int(m.group(2))))
    m = re.search(r"^(\S+)Z .*event=Assigned\(\[\d", l)
    if m and first is None:
        first = datetime.datetime.fromisoformat(m.group(1))
if len(pts) < 2 or first is None:
    print("n/a"); sys.exit()
(t0, r0), (t1, r1) = pts[0], pts[-1]
if sys.argv[2] == "stage":
    print(f"{(r1 - r0) / (t1 - t0).total_seconds():.0f}")
else:
    print(f"{r1 / (t1 - first).total_seconds():.0f}")
PY
}
wait_progress() { # log file, records[, what the line must also say]
  # `route` lines count records too: the dedup stage's are told apart by "progress".
  for _ in $(seq 1 1200); do
    grep -qE "${3:-}.*records=$2( |\$)" "$1" 2>/dev/null && return 0
    sleep 0.25
  done
  return 1
}
cpu() { # CPU seconds (user + system) used so far by process $1
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.2f", ($14 + $15) / hz }' "/proc/$1/stat"
}
broker=$(cat "$SIMDEDUP_RUN/broker.pid")
last=$(( (n / 10000) * 10000 ))
# The copy's topic exists before either baseline starts (confluent-kafka's producer does not
# create topics, and tansu does not create them on produce).
"$bin" produce --brokers "$SIMDEDUP_BROKERS" --topic bench.copy --partitions 8 --input /dev/null 2>/dev/null
b0=$(cpu "$broker")
if [ "$baseline" = confluent ]; then
  "$venv/bin/python" scripts/passthrough.py "$SIMDEDUP_BROKERS" bench.posts bench.copy "$n" 2> "$work/pass.log" &
else
  "$bin" --log-level info passthrough --brokers "$SIMDEDUP_BROKERS" --from bench.posts --to bench.copy 2> "$work/pass.log" &
fi
pid=$!
wait_progress "$work/pass.log" "$last" || { echo "passthrough did not finish:" >&2; tail -5 "$work/pass.log" >&2; exit 1; }
pass_cpu=$(cpu $pid); b1=$(cpu "$broker")
kill -TERM $pid; wait $pid || true
b2=$(cpu "$broker")
"$bin" --log-level info run --role all --brokers "$SIMDEDUP_BROKERS" --group-id bench --input-topic bench.posts \
  --routed-topic bench.routed --unique-topic bench.unique --duplicates-topic bench.dups \
  --rejected-topic bench.rejected --changelog-topic bench.changelog --metrics-addr 127.0.0.1:0 \
  2> "$work/all.log" &
pid=$!
wait_progress "$work/all.log" "$last" "dedup: progress" || { echo "run --role all did not finish:" >&2; tail -5 "$work/all.log" >&2; }
all_cpu=$(cpu $pid); b3=$(cpu "$broker")
kill -TERM $pid; wait $pid || true
# The ceiling of the engine itself: the file pipeline on the same records, one thread, no broker
# (`--role all` runs the same analysis and decisions, split over two threads, plus two stages'
# Kafka clients and the broker on the same two cores).
f=$("$bin" dedup --input "$work/stream.jsonl" --unique-out /dev/null --duplicates-out /dev/null \
  --rejected-out /dev/null 2>&1 | sed -n 's/.*(\([0-9]*\) records\/s).*/\1/p' | tail -1)
p=$(rate "$work/pass.log" end); a=$(rate "$work/all.log" end)
ps=$(rate "$work/pass.log" stage); as=$(rate "$work/all.log" stage)
echo "records: $n (8 raw partitions, 8 routed partitions, tansu with ${SIMDEDUP_BENCH_STORAGE:-sqlite} storage)"
echo "pass-through ($baseline): $p records/s end-to-end ($ps between progress lines)"
echo "run --role all: $a records/s end-to-end ($as for the dedup stage between progress lines)"
python3 -c "import sys; p,a=sys.argv[1],sys.argv[2]; print(f'ratio all/pass-through, end-to-end: {float(a)/float(p):.2f}' if p!='n/a' and a!='n/a' else 'ratio: n/a')" "$p" "$a"
python3 -c "import sys; p,f=sys.argv[1],sys.argv[2]; print(f'file pipeline (one thread, no broker): {f} records/s, {float(f)/float(p):.2f} of the pass-through' if p!='n/a' and f else 'file pipeline: n/a')" "$p" "${f:-}"
# CPU per 1,000 records: where the time goes on a machine where the broker shares the cores.
python3 - "$n" "$pass_cpu" "$b0" "$b1" "$all_cpu" "$b2" "$b3" <<'PY'
import sys
n = int(sys.argv[1]); pw, b0, b1, aw, b2, b3 = map(float, sys.argv[2:])
pb, ab = b1 - b0, b3 - b2
k = n / 1000
print(f"CPU s per 1,000 records: pass-through worker {pw / k:.3f}, broker {pb / k:.3f}; "
      f"run --role all worker {aw / k:.3f}, broker {ab / k:.3f}")
PY
