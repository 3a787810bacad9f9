#!/usr/bin/env bash
# Scores `simdedup dedup` on the labelled dev stream with the benchmark's own score.py, then
# measures whole-process throughput pinned to one core. Needs ../shared (the benchmark) beside the
# repository and python3.
#   scripts/bench-dev.sh                 # default config
#   scripts/bench-dev.sh my.toml         # another config (e.g. an ablation)
set -euo pipefail
cd "$(dirname "$0")/.."
bench=${SIMDEDUP_BENCH:-../shared/bench}
stream=$bench/weibo-dev-small
[ -f "$stream/posts.jsonl" ] || { echo "no benchmark at $stream (set SIMDEDUP_BENCH)" >&2; exit 2; }
cfg=()
[ $# -ge 1 ] && cfg=(--config "$1")
cargo build --release --locked -q
bin=target/release/simdedup
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
run() {
  rm -rf "$out/state"
  "$bin" --log-level warn dedup --input "$stream/posts.jsonl" --unique-out "$out/unique.jsonl" \
    --duplicates-out "$out/dups.jsonl" --rejected-out "$out/rejected.jsonl" --state-dir "$out/state" "${cfg[@]}"
}
run
python3 "$bench/score.py" --truth "$stream/truth.jsonl" --unique "$out/unique.jsonl" \
  --duplicates "$out/dups.jsonl" --posts "$stream/posts.jsonl" --json-out "$out/score.json" >/dev/null
python3 - "$out/score.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
k = r["recall_by_kind"]
print(f"score.py: precision {r['precision']}  recall {r['recall']}  F1 {r['f1']}")
print(f"  recall format {k.get('format')}  light {k.get('light')}  heavy {k.get('heavy')}  natural {k.get('natural')}")
print(f"  lcqmc_neg flagged {r['lcqmc_neg_fp']} of {r['lcqmc_neg_posts_scored']} ({100*r['lcqmc_neg_fp']/r['lcqmc_neg_posts_scored']:.2f}%)")
print(f"  lost {r['lost']}  output twice {r['duplicated_outputs']}  precision len>=12 {r['by_length']['len>=12']['precision']}")
PY
if command -v taskset >/dev/null; then
  echo "throughput, whole process pinned to core 0 (3 runs; the tool's own rate excludes start-up):"
  for _ in 1 2 3; do
    start=$(date +%s.%N)
    rm -rf "$out/state"
    taskset -c 0 "$bin" --log-level warn dedup --input "$stream/posts.jsonl" --unique-out "$out/unique.jsonl" \
      --duplicates-out "$out/dups.jsonl" --rejected-out "$out/rejected.jsonl" --state-dir "$out/state" "${cfg[@]}" 2>"$out/err"
    end=$(date +%s.%N)
    n=$(wc -l < "$stream/posts.jsonl")
    python3 -c "import sys; n,s,e=int(sys.argv[1]),float(sys.argv[2]),float(sys.argv[3]); print(f'  {n} posts in {e-s:.3f} s = {n/(e-s):,.0f} posts/s (process)')" "$n" "$start" "$end"
    sed 's/^/    /' "$out/err"
  done
fi
