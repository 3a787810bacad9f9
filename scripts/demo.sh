#!/usr/bin/env bash
# The whole local pipeline in one command, with a short report at the end.
#
#   scripts/demo.sh                # Kafka: local tansu broker, generated posts, `simdedup run --role all`
#   scripts/demo.sh --file         # no Kafka: `simdedup dedup` on generated posts (seconds)
#   options: --count N (default 20000)  --seed S (default 1)  --keep (keep the work dir)
#
# Kafka mode steps: build (if needed); start tansu with SQLite storage via scripts/broker.sh (the
# first run installs tansu from crates.io: 10-20 minutes on 2 cores, once); create the topics;
# `simdedup generate` N posts into the raw topic; `simdedup run --role all --metrics-addr ...`;
# wait until every post is decided; report; stop the worker with SIGTERM and the broker. A trap
# stops whatever was started, also on Ctrl-C or failure. Needs cargo, python3 and curl (curl only
# for the metrics endpoint).
set -euo pipefail
cd "$(dirname "$0")/.."

mode=kafka count=20000 seed=1 keep=
while [ $# -gt 0 ]; do
  case "$1" in
    --file) mode=file; shift ;;
    --count) count=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    *) echo "demo.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$count" =~ ^[0-9]+$ && "$count" -gt 0 ]] || { echo "demo.sh: --count must be a positive number" >&2; exit 2; }

say() { echo "demo: $*" >&2; }
command -v python3 >/dev/null || { say "python3 is needed for the report"; exit 1; }
bin=$PWD/target/release/simdedup
if [ ! -x "$bin" ] || [ -n "$(find src config Cargo.toml Cargo.lock -newer "$bin" -print -quit)" ]; then
  command -v cargo >/dev/null || { say "cargo not found: install Rust from https://rustup.rs"; exit 1; }
  say "building the release binary (a few minutes on a fresh clone)"
  cargo build --release --locked -q
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/simdedup-demo.XXXXXX")
export SIMDEDUP_RUN=${SIMDEDUP_RUN:-$work/broker}
worker= broker=
cleanup() {
  local rc=$?
  if [ -n "$worker" ] && kill -0 "$worker" 2>/dev/null; then
    kill -TERM "$worker" 2>/dev/null || true
    wait "$worker" 2>/dev/null || true
  fi
  [ -z "$broker" ] || bash scripts/broker.sh stop >/dev/null 2>&1 || true
  if [ -n "$keep" ]; then say "work dir kept: $work"; else rm -rf "$work"; fi
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

posts=$work/posts.jsonl truth=$work/truth.jsonl
# Deterministic: the Kafka mode regenerates this file with the same seed to look texts up.
"$bin" generate --count "$count" --seed "$seed" --output "$posts" --truth "$truth" 2>/dev/null

report() { # unique.jsonl duplicates.jsonl rejected.jsonl seconds
  python3 - "$posts" "$truth" "$@" <<'PY'
import collections, json, sys
posts_f, truth_f, uniq_f, dups_f, rej_f, secs = sys.argv[1:7]
text = {}
for l in open(posts_f, encoding="utf-8"):
    p = json.loads(l); text[p["id"]] = p["text"]
truth = {}
for l in open(truth_f, encoding="utf-8"):
    t = json.loads(l); truth[t["id"]] = t
def lines(f):
    return [l for l in open(f, encoding="utf-8") if l.strip()]
uniq = [json.loads(l) for l in lines(uniq_f)]
dups = [json.loads(l) for l in lines(dups_f)]
rej = [json.loads(l) for l in lines(rej_f)]
n = len(text); decided = len(uniq) + len(dups) + len(rej); secs = float(secs)
print(f"posts in        {n}")
print(f"decided         {decided}")
print(f"unique          {len(uniq)}")
print(f"duplicates      {len(dups)}")
reasons = collections.Counter(r.get("reason") for r in rej)
print(f"rejected        {len(rej)}" + (f"  ({', '.join(f'{k}={v}' for k, v in reasons.items())})" if rej else ""))
if secs > 0:
    print(f"throughput      {decided / secs:,.0f} posts/s ({decided} posts in {secs:.1f} s, start-up included)")
flagged = {d["post_id"] for d in dups}
kinds = collections.Counter(t["kind"] for t in truth.values() if t["label"] == "dup")
print("duplicates found by kind (generator truth):")
for k in ("exact", "format", "light", "heavy"):
    if kinds[k]:
        hit = sum(1 for i, t in truth.items() if t["kind"] == k and i in flagged)
        print(f"  {k:<7} {hit:>6} of {kinds[k]:<6} {hit / kinds[k]:.1%}")
fp = sum(1 for i, t in truth.items() if t["label"] == "unique" and i in flagged)
uniques = sum(1 for t in truth.values() if t["label"] == "unique")
print(f"  unique posts wrongly flagged: {fp} of {uniques} ({fp / max(uniques, 1):.2%})")
sizes = collections.Counter(d["cluster_id"] for d in dups)
print("largest clusters (posts, representative text):")
for cid, c in sizes.most_common(5):
    t = text.get(cid, "?").replace("\n", " ")
    print(f"  {c + 1:>4}  {t[:60]}{'…' if len(t) > 60 else ''}")
PY
}

if [ "$mode" = file ]; then
  say "file mode: simdedup dedup on $count generated posts (seed $seed)"
  out=$work/out
  mkdir -p "$out"
  "$bin" dedup --input "$posts" --unique-out "$out/unique.jsonl" --duplicates-out "$out/duplicates.jsonl" \
    --rejected-out "$out/rejected.jsonl" --state-dir "$out/state" --no-progress 2>"$out/summary.txt"
  cat "$out/summary.txt" >&2
  secs=$(sed -n 's/.* records in \([0-9.]*\) s .*/\1/p' "$out/summary.txt")
  echo "== simdedup demo (file mode) =="
  report "$out/unique.jsonl" "$out/duplicates.jsonl" "$out/rejected.jsonl" "${secs:-0}"
  exit 0
fi

say "starting a local tansu broker (SQLite storage); the first run installs tansu: 10-20 minutes on 2 cores"
broker=1
line=$(bash scripts/broker.sh start --sqlite "$work/broker.db")
eval "$line"
export SIMDEDUP_BROKERS
bash scripts/broker.sh topics posts:8 simdedup.routed:8 posts.unique:8 posts.duplicates:8 \
  posts.rejected:8 simdedup.changelog:1
say "generating $count posts into topic posts"
"$bin" generate --count "$count" --seed "$seed" --topic posts --brokers "$SIMDEDUP_BROKERS"

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
metrics=
if "$bin" run --help | grep -q -- '--metrics-addr'; then
  metrics=127.0.0.1:$port
else
  say "this build has no --metrics-addr: waiting on the output topics instead"
fi
say "starting simdedup run --role all${metrics:+ (metrics at http://$metrics/metrics)}"
t0=$(date +%s.%N)
"$bin" run --role all --brokers "$SIMDEDUP_BROKERS" ${metrics:+--metrics-addr "$metrics"} 2>"$work/worker.log" &
worker=$!

decided_by_metrics() {
  curl -fsS "http://$metrics/metrics" 2>/dev/null | python3 -c '
import sys
n = 0
for l in sys.stdin:
    if l.startswith(("simdedup_posts_unique_total", "simdedup_posts_duplicate_total", "simdedup_posts_rejected_total")):
        n += float(l.split()[-1])
print(int(n))'
}
decided_by_topics() {
  local n=0 t c
  for t in posts.unique posts.duplicates posts.rejected; do
    c=$("$bin" export --brokers "$SIMDEDUP_BROKERS" --topic "$t" --idle-ms 800 2>/dev/null | wc -l)
    n=$((n + c))
  done
  echo "$n"
}
deadline=$((SECONDS + ${SIMDEDUP_DEMO_TIMEOUT:-600}))
decided=0
while [ "$decided" -lt "$count" ]; do
  kill -0 "$worker" 2>/dev/null || { say "the worker exited early; its log:"; tail -20 "$work/worker.log" >&2; exit 1; }
  [ $SECONDS -lt $deadline ] || { say "timed out with $decided of $count decided; worker log:"; tail -20 "$work/worker.log" >&2; exit 1; }
  sleep 1
  if [ -n "$metrics" ]; then decided=$(decided_by_metrics || echo 0); else decided=$(decided_by_topics); fi
  say "decided $decided of $count"
done
t1=$(date +%s.%N)
secs=$(python3 -c "print(f'{$t1 - $t0:.2f}')")

if [ -n "$metrics" ]; then
  echo "== GET /health =="
  curl -sS "http://$metrics/health" || echo "(no answer)"
  echo
  echo "== GET /metrics (simdedup_posts_*) =="
  curl -sS "http://$metrics/metrics" | grep '^simdedup_posts_' | head -8 || echo "(no answer)"
fi
for t in unique duplicates rejected; do
  "$bin" export --brokers "$SIMDEDUP_BROKERS" --topic "posts.$t" --output "$work/$t.jsonl" --idle-ms 1500 2>/dev/null
done
echo "== simdedup demo (Kafka mode: tansu, run --role all, 8 raw and 8 routed partitions) =="
report "$work/unique.jsonl" "$work/duplicates.jsonl" "$work/rejected.jsonl" "$secs"
say "stopping the worker (SIGTERM) and the broker"
kill -TERM "$worker"
wait "$worker" || say "worker exited with $?"
worker=
grep -a 'dedup stage decided' "$work/worker.log" >&2 || true
