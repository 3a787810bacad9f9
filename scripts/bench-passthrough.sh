#!/usr/bin/env bash
# `run --role all` against a pass-through, ROUNDS times: each round is one run of
# scripts/bench-kafka.sh (a fresh tansu, the pass-through first, then `run --role all`, on the
# same records). Prints each round's end-to-end rates, their ratio (and the ratio of the rates
# between the progress lines, each run's steady pace once running) and the CPU seconds per 1,000
# records, then the medians and the median of the per-round end-to-end ratios: the figure to
# quote, since the machine's pace moves from minute to minute and both runs of a round see the
# same machine.
#   scripts/bench-passthrough.sh ROUNDS [POSTS.jsonl] [COPIES]
# Everything bench-kafka.sh reads from the environment passes through (SIMDEDUP_BENCH_STORAGE,
# SIMDEDUP_BENCH_BASELINE, SIMDEDUP_BENCH_BIN). Each round's whole output is kept in a directory
# printed at the start (SIMDEDUP_PASSTHROUGH_OUT to choose it). Each round also times the file
# pipeline on the same records (one thread, no broker) against the same pass-through: the
# engine's own ceiling, for scale. The issue's figure:
#   python3 scripts/rumdect.py 400000 > out/rumdect400k.jsonl
#   SIMDEDUP_BENCH_STORAGE=memory SIMDEDUP_BENCH_BASELINE=confluent \
#     scripts/bench-passthrough.sh 7 out/rumdect400k.jsonl 1
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-}
[[ $rounds =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: $0 ROUNDS [POSTS.jsonl] [COPIES]" >&2
  exit 2
}
shift
out=${SIMDEDUP_PASSTHROUGH_OUT:-$(mktemp -d)}
mkdir -p "$out"
: > "$out/rates"
echo "logs: $out"
for r in $(seq "$rounds"); do
  log="$out/round$r.log"
  if ! scripts/bench-kafka.sh "$@" > "$log" 2>&1; then
    echo "round $r: bench-kafka.sh failed; see $log" >&2
    tail -5 "$log" >&2
    exit 1
  fi
  python3 - "$log" "$r" "$out/rates" <<'PY'
import re, sys
log, r, rates = sys.argv[1], sys.argv[2], sys.argv[3]
text = open(log, encoding="utf-8", errors="replace").read()
p = re.search(r"^pass-through \([^)]*\): (\d+) records/s end-to-end \((\d+|n/a) between", text, re.M)
a = re.search(r"^run --role all: (\d+) records/s end-to-end \((\d+|n/a) for the dedup", text, re.M)
cpu = re.search(r"run --role all worker (\d+\.\d+), broker (\d+\.\d+)", text)
f = re.search(r"^file pipeline \(one thread, no broker\): (\d+) records/s", text, re.M)
if not (p and a):
    sys.exit(f"round {r}: no end-to-end rate in {log}")
steady = f"{int(a[2]) / int(p[2]):.2f}" if "n/a" not in (a[2], p[2]) else "n/a"
p, a = int(p[1]), int(a[1])
print(f"round {r}: pass-through {p} records/s, run --role all {a} records/s: ratio {a / p:.2f}"
      + f" ({steady} between progress lines)"
      + (f" (CPU s per 1,000 records: worker {cpu[1]}, broker {cpu[2]})" if cpu else "")
      + (f"; file pipeline {f[1]} records/s: {int(f[1]) / p:.2f}" if f else ""),
      flush=True)
with open(rates, "a") as f:
    f.write(f"{p} {a}\n")
PY
done
python3 scripts/ratios.py "$out/rates" pass-through "run --role all" records/s
