#!/usr/bin/env bash
# One against two dedup workers on the same backlog, side by side: ROUNDS rounds, each running
# scripts/bench-backlog.sh with one dedup worker and then with two (the order alternates from
# round to round, so that a machine growing busier or quieter does not favour one of them).
# Prints each round's drain rates (5% to 95% of the verdicts out), their ratio, the machine's
# CPU seconds per 1,000 posts meanwhile and each dedup worker's share of the drain spent waiting
# on the order; then the medians, and the median of the per-round ratios: the figure to quote,
# since both runs of a round see the same machine.
#   scripts/bench-ratio.sh ROUNDS [COPIES] [POSTS.jsonl]
# Everything bench-backlog.sh reads from the environment passes through: SIMDEDUP_BENCH_BROKER
# (mock for librdkafka's mock broker), SIMDEDUP_BACKLOG_ROUTED=1 (the dedup stage alone),
# SIMDEDUP_BACKLOG_CONFIG, SIMDEDUP_BACKLOG_PARTITIONS, SIMDEDUP_BACKLOG_CORES (each dedup
# worker on a core of its own: one core against two), SIMDEDUP_BENCH_BIN. Each run's whole
# output is kept in a directory printed at the start (SIMDEDUP_RATIO_OUT to choose it).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "usage: $0 ROUNDS [COPIES] [POSTS.jsonl]" >&2; exit 2; }
shift
out=${SIMDEDUP_RATIO_OUT:-$(mktemp -d)}
mkdir -p "$out"
: > "$out/rates"
echo "logs: $out"
for r in $(seq "$rounds"); do
  order="1 2"
  [ $((r % 2)) -eq 0 ] && order="2 1"
  for w in $order; do
    log="$out/round$r-workers$w.log"
    if ! scripts/bench-backlog.sh "$w" "$@" > "$log" 2>&1; then
      echo "round $r, $w worker(s): bench-backlog.sh failed; see $log" >&2
      tail -5 "$log" >&2
      exit 1
    fi
  done
  python3 - "$out" "$r" <<'PY'
import re, sys
out, r = sys.argv[1], sys.argv[2]
def run(w):
    text = open(f"{out}/round{r}-workers{w}.log").read()
    rate = re.search(r"drain rate, 5% to 95% of the verdicts out: (\d+) posts/s", text)
    cpu = re.search(r"(\d+\.\d+) CPU s per 1,000 posts in all", text)
    waits = re.search(r"waited on the order \(posts buffered, none allowed\): (.*)", text)
    if not rate:
        sys.exit(f"round {r}, {w} worker(s): no drain rate in the log (too few samples?)")
    return int(rate[1]), cpu[1] if cpu else "?", waits[1] if waits else "?"
(r1, c1, _), (r2, c2, w2) = run(1), run(2)
print(f"round {r}: one {r1} posts/s ({c1} CPU s per 1,000 posts), two {r2} posts/s "
      f"({c2}; waiting {w2}): ratio {r2 / r1:.2f}", flush=True)
with open(f"{out}/rates", "a") as f:
    f.write(f"{r1} {r2}\n")
PY
done
python3 scripts/ratios.py "$out/rates" one two posts/s
