#!/usr/bin/env bash
# Scale benchmark (tests/benches/scale): a realistic background firehose recombined from the real
# weibo-rumdect clauses of dev-split events (none of the labelled dev stream's events or posts)
# is streamed into one engine until its 48-hour window holds the target number of live entries;
# then the labelled dev stream, re-timed into the window, is interleaved with more background,
# and finally the window is committed to sled and a restart (load + index rebuild) is timed,
# then a second one that loads the sealed generations the first wrote whole (`state.keep_sealed`).
# Prints a line per checkpoint (1M, 5M, 10M, 20M live entries by default), the dev posts' score
# next to dev alone, the dev posts matched to background posts, and the restart times. Needs
# ../shared (data and benchmark) beside the repository, python3, gzip.
#
#   scripts/bench-scale.sh                       # 1M live entries (a few minutes)
#   scripts/bench-scale.sh --entries 20M --max-rss-gb 12 --max-secs 900
#   scripts/bench-scale.sh --entries 5M --checkpoints 1M,2M --seed 7 --dev-span-hours 6
#   scripts/bench-scale.sh --entries 1M --no-restart
# Flags (all optional): --entries N (target live entries, K/M suffixes), --checkpoints LIST,
# --max-rss-gb G (the background stops at 0.9 G, leaving room for the dev phase; default 12),
# --max-secs S (wall budget of the background; default 900), --seed N, --dev-span-hours H
# (event-time span the dev stream is re-timed into, shortened in proportion when the background
# stops short of the target; default 3), --dev-gap-cap-secs S (gaps between dev posts are capped
# at S before the linear squeeze; default 60), --no-restart, --keep-state (keep the sled state
# the restart read in OUT/state, to time restarts of it again with `simdedup dedup --config ...
# --state-dir OUT/state --input EMPTY.jsonl`), --in-memory (keep entries' ids, texts
# and tokens in memory, as `state.spill_texts = false`; by default they go to spill files under the
# output directory, as `simdedup dedup --state-dir` does). A configuration file and variables
# apply to the engine, and to the dev stream alone, as they do to `simdedup`
# (SIMDEDUP_CONFIG=config/firehose.toml or SIMDEDUP_INDEX__POSTING_SCAN_CAP=64 before
# scripts/bench-scale.sh ...), and are listed in summary.json.
# The run is pinned to one core (taskset) and niced; the restart uses every core, as `simdedup
# dedup --state-dir` does. Outputs: target/bench-scale/ (summary.json,
# the dev posts' verdicts, the re-timed dev stream) or $SIMDEDUP_SCALE_OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
shared=${SIMDEDUP_SHARED:-../shared}
stream=$shared/bench/weibo-dev-small
corpus=$shared/data/weibo-rumdect/posts.jsonl.gz
out=${SIMDEDUP_SCALE_OUT:-target/bench-scale}
[ -f "$stream/posts.jsonl" ] || { echo "no dev stream at $stream (set SIMDEDUP_SHARED)" >&2; exit 2; }
[ -f "$corpus" ] || { echo "no corpus at $corpus (set SIMDEDUP_SHARED)" >&2; exit 2; }
mkdir -p "$out"
cargo build --release --locked -q
cargo bench --locked -q --bench scale --no-run
bench=$(ls -t target/release/deps/scale-* | grep -v '\.d$' | head -1)
pin=()
command -v taskset >/dev/null && pin=(taskset -c "${SIMDEDUP_CORE:-0}")
nice "${pin[@]}" "$bench" --corpus "$corpus" --dev "$stream" --out "$out" "$@" > "$out/run.json"

# Dev alone, as scripts/bench-dev.sh runs it: on the original stream and on the re-timed copy
# the scale run used (re-timing brings the dev events closer together, which alone can change
# a few verdicts), then score.py on all three.
dedup() {
  rm -rf "$out/alone-state"
  target/release/simdedup --log-level warn dedup --input "$1" --unique-out "$2/unique.jsonl" \
    --duplicates-out "$2/duplicates.jsonl" --rejected-out "$2/rejected.jsonl" --state-dir "$out/alone-state"
  rm -rf "$out/alone-state"
}
score() {
  python3 "$shared/bench/score.py" --truth "$stream/truth.jsonl" --unique "$1/unique.jsonl" \
    --duplicates "$1/duplicates.jsonl" --posts "$stream/posts.jsonl" --json-out "$1/score.json" >/dev/null
}
mkdir -p "$out/alone" "$out/alone-retimed"
dedup "$stream/posts.jsonl" "$out/alone"
dedup "$out/dev-retimed.jsonl" "$out/alone-retimed"
score "$out/alone"
score "$out/alone-retimed"
score "$out"
python3 - "$out" "$stream/truth.jsonl" <<'PY'
import json, sys
out, truth_path = sys.argv[1], sys.argv[2]
run = json.load(open(f"{out}/run.json"))
truth = {t["id"]: t for t in map(json.loads, open(truth_path))}
print("\ncheckpoints (interval figures; engine = analysis + decide, timed per post):")
print(f"{'at':>10} {'live':>11} {'posts':>11} {'wall/s':>8} {'cpu/s':>8} {'engine/s':>9} {'load':>5} {'p50us':>6} {'p99us':>7} {'pauses':>12} "
      f"{'verif/post':>10} {'rej/post':>8} {'RSS MB':>7} {'B/entry':>7} {'growth':>7}")
for c in run["run"]["checkpoints"]:
    print(f"{c['at']:>10} {c['live_entries']:>11,} {c['posts']:>11,} {c['wall_posts_per_sec']:>8,.0f} "
          f"{c['cpu_posts_per_sec']:>8,.0f} {c['engine_posts_per_sec']:>9,.0f} {c['load_avg']:>5.1f} {c['p50_us']:>6.1f} {c['p99_us']:>7.1f} "
          f"{c['pauses']:>5} ({100 * c['pause_share']:>4.1f}%) "
          f"{c['verified_per_post']:>10.2f} {c['verify_rejects_per_post']:>8.2f} {c['rss_bytes']/1e6:>7,.0f} "
          f"{c['rss_per_entry']:>7.0f} {c['rss_growth_per_entry']:>7.0f}")
r = run["run"]
print(f"background stopped by: {r['stopped_by']} after {r['background_secs']:.0f} s at {r['live_entries_reached']:,} live entries; "
      f"{r['event_hours']:.1f} event hours; peak RSS {run['peak_rss_bytes']/1e9:.2f} GB")
names = {"alone": "dev alone", "alone-retimed": "dev alone, re-timed", ".": "dev in background"}
rows = {k: json.load(open(f"{out}/{k}/score.json")) for k in names}
kinds = sorted({k for s in rows.values() for k in s["recall_by_kind"]})
print("\ndev score (score.py on the dev posts only):")
print(f"{'':22} {'precision':>9} {'recall':>7} " + " ".join(f"{k:>9}" for k in kinds) + "  lcqmc_neg_fp  lost")
for k, name in names.items():
    s = rows[k]
    print(f"{name:22} {s['precision']:>9} {s['recall']:>7} " +
          " ".join(f"{str(s['recall_by_kind'].get(x)):>9}" for x in kinds) +
          f"  {s['lcqmc_neg_fp']:>12}  {s['lost']:>4}")
print("precision by kind, dev in background vs re-timed alone:",
      {k: (rows['.']['precision_by_kind'].get(k), rows['alone-retimed']['precision_by_kind'].get(k))
       for k in sorted(rows['.']['precision_by_kind'])})
d = r["dev"]
bg = [json.loads(l) for l in open(f"{out}/to-background.jsonl")]
print(f"\ndev posts matched to background posts: {d['matched_to_background']} of {d['posts']} "
      f"({100*d['matched_to_background']/max(d['posts'],1):.3f}%), by method {d['matched_to_background_by_method']}")
from collections import Counter
print("  by truth label/kind:", dict(Counter(f"{truth[b['id']]['label']}/{truth[b['id']]['kind']}" for b in bg if b['id'] in truth)))
for b in bg[:8]:
    print(f"  {b['id']} ({b['method']}, score {b['score']:.2f}): {b['normalized'][:40]!r} ~ background {str(b['background_normalized'])[:40]!r}")
if "restart" in run:
    x = run["restart"]
    print(f"\nrestart from sled: {x['committed']:,} entries committed in {x['commit_secs']:.1f} s "
          f"({x['disk_bytes']/1e6:,.0f} MB on disk); open {x['load_secs']:.1f} s + read and rebuild "
          f"{x['restore_secs']:.1f} s = {x['restart_secs']:.1f} s on {x.get('threads', 1)} threads")
    if x.get("sealed_restart_secs") is not None:
        print(f"restart with the {x['sealed_written']} sealed generations that restart wrote whole: "
              f"{x['sealed_restart_secs']:.1f} s ({x['sealed_loaded']:,} entries loaded whole, the rest from sled)")
print(f"\nfull summary: {out}/run.json")
PY
