#!/usr/bin/env bash
# The Kafka topology on a local tansu broker, checked against the file pipeline:
#   all   one `run --role all` process decides the stream (8 routed partitions);
#   kill  one route worker and two dedup workers in one group decide it; once the group has
#         decided KILL_AT records, one dedup worker is killed with SIGKILL and restarted.
# The script waits until every post has a verdict on the output topics, then compares them with
# the file pipeline's verdicts on the same stream and prints lost posts, posts with more than one
# distinct verdict, and the share of posts whose verdict agrees. With a truth.jsonl beside the
# posts (the benchmark's layout) it also scores the output topics with the benchmark's score.py.
#   scripts/kafka-check.sh [all|kill] [POSTS.jsonl] [KILL_AT]
# Defaults: kill, ../shared/bench/weibo-dev-small/posts.jsonl, kill after 15,000 decided records.
# Environment: SIMDEDUP_KILL_TIMEOUT (seconds to wait for all verdicts, default 1800),
# SIMDEDUP_RESTART_DELAY (seconds between the kill and the restart, default 15: see below),
# SIMDEDUP_BENCH_KEEP=1 keeps the work dir (logs, exports); it is kept anyway, and the script
# exits 1, when the check fails: a post lost, a post with two different verdicts (named), a
# repeated output (at least once) not byte-identical to the post's first output (named), or
# under 99.9% of posts with the file pipeline's verdict.
set -euo pipefail
cd "$(dirname "$0")/.."
mode=${1:-kill}
input=${2:-../shared/bench/weibo-dev-small/posts.jsonl}
kill_at=${3:-15000}
case $mode in all|kill) ;; *) echo "usage: $0 [all|kill] [POSTS.jsonl] [KILL_AT]" >&2; exit 2 ;; esac
timeout=${SIMDEDUP_KILL_TIMEOUT:-1800}
# tansu 0.6 and a dead member (measured): when the replacement joins before the session timeout
# evicts the dead member, the dead member still gets partitions in the new assignment (a restart
# 2 s after the kill left 3 of 8 partitions with nobody, for good); after the eviction the
# survivors get only their own partitions back, and the dead member's go to the next member that
# joins. Restarting after the session timeout (10 s here) is the sequence tansu gets right.
restart_delay=${SIMDEDUP_RESTART_DELAY:-15}
source scripts/bench-env.sh
[ "$mode" = all ] || bench_sqlite_only "$0 kill"
bench_start
n=$(grep -c . "$input")

# A dead member is evicted after session.timeout.ms; 10 s keeps the test short.
cat > "$work/config.toml" <<'TOML'
[kafka]
group_id = "kill"
input_topic = "kill.posts"
routed_topic = "kill.routed"
unique_topic = "kill.unique"
duplicates_topic = "kill.dups"
rejected_topic = "kill.rejected"
changelog_topic = "kill.changelog"
routed_partitions = 8

[kafka.consumer]
"session.timeout.ms" = "10000"
"heartbeat.interval.ms" = "1000"
TOML
common=(--log-level info run --brokers "$SIMDEDUP_BROKERS" --config "$work/config.toml" --metrics-addr 127.0.0.1:0)

"$bin" dedup --input "$input" --unique-out "$work/file.unique" --duplicates-out "$work/file.dups" \
  --rejected-out "$work/file.rejected" --no-progress 2> /dev/null
"$bin" produce --brokers "$SIMDEDUP_BROKERS" --topic kill.posts --partitions 8 --input "$input"

start=$(date +%s)
if [ "$mode" = all ]; then
  "$bin" "${common[@]}" --role all 2> "$work/all.log" & pids+=($!)
else
  "$bin" "${common[@]}" --role route 2> "$work/route.log" & pids+=($!)
  "$bin" "${common[@]}" --role dedup 2> "$work/a.log" & pids+=($!)
  "$bin" "${common[@]}" --role dedup 2> "$work/b.log" & b=$!; pids+=($b)

  decided() { # records decided so far by both workers (newest progress line of each log)
    local total=0 f r
    for f in "$work"/a.log "$work"/b*.log; do
      r=$(grep -o 'progress records=[0-9]*' "$f" 2>/dev/null | tail -1 | grep -o '[0-9]*$' || true)
      total=$((total + ${r:-0}))
    done
    echo "$total"
  }
  while [ "$(decided)" -lt "$kill_at" ]; do
    sleep 1
    if [ $(( $(date +%s) - start )) -gt "$timeout" ]; then echo "never reached $kill_at decided records" >&2; exit 1; fi
  done
  echo "killing dedup worker B (pid $b) after $(decided) decided records, $(( $(date +%s) - start )) s" >&2
  kill -KILL "$b"
  wait "$b" 2>/dev/null || true
  sleep "$restart_delay"
  "$bin" "${common[@]}" --role dedup 2> "$work/b2.log" & pids+=($!)
  echo "restarted B" >&2
fi

count() { # distinct post ids with a verdict on the output topics
  for t in kill.unique kill.dups kill.rejected; do
    "$bin" export --brokers "$SIMDEDUP_BROKERS" --topic "$t" --idle-ms 1500 > "$work/$t.jsonl"
  done
  python3 - "$work" <<'PY'
import json, sys
w = sys.argv[1]
ids = set()
for l in open(f"{w}/kill.unique.jsonl", encoding="utf-8"):
    ids.add(json.loads(l)["id"])
for l in open(f"{w}/kill.dups.jsonl", encoding="utf-8"):
    ids.add(json.loads(l)["post_id"])
print(len(ids) + sum(1 for _ in open(f"{w}/kill.rejected.jsonl", encoding="utf-8")))
PY
}
while :; do
  c=$(count)
  echo "$(( $(date +%s) - start )) s: $c of $n posts have a verdict" >&2
  [ "$c" -ge "$n" ] && break
  if [ $(( $(date +%s) - start )) -gt "$timeout" ]; then echo "timed out" >&2; break; fi
  sleep 10
done
elapsed=$(( $(date +%s) - start ))
python3 - "$work" "$input" "$elapsed" <<'PY'
import json, sys
w, inp, elapsed = sys.argv[1], sys.argv[2], sys.argv[3]
def load(unique, dups):
    v = {}
    for l in open(unique, encoding="utf-8"):
        v.setdefault(json.loads(l)["id"], set()).add("unique")
    for l in open(dups, encoding="utf-8"):
        j = json.loads(l)
        v.setdefault(j["post_id"], set()).add("dup of " + j["cluster_id"])
    return v
live = load(f"{w}/kill.unique.jsonl", f"{w}/kill.dups.jsonl")
ref = load(f"{w}/file.unique", f"{w}/file.dups")
ids = [json.loads(l)["id"] for l in open(inp, encoding="utf-8") if l.strip()]
rejected = sum(1 for _ in open(f"{w}/kill.rejected.jsonl", encoding="utf-8"))
lost = [i for i in ids if i not in live and i in ref]
conflicting = [i for i in live if len(live[i]) > 1]
same = sum(1 for i in ref if live.get(i) == ref[i])
print(f"posts: {len(ids)}  with a verdict: {len(live)}  rejected: {rejected}  lost: {len(lost)}")
print(f"posts with two different verdicts: {len(conflicting)}")
for i in conflicting[:10]:
    print(f"  {i}: {sorted(live[i])}; the file pipeline: {sorted(ref.get(i, []))}")
print(f"same verdict as the undisturbed pipeline: {same} of {len(ref)} ({same / len(ref):.4%})")
# At-least-once: a re-decided post is output again, and must be output exactly as the first time.
# Each post's first output is kept in NAME.first.jsonl, for scoring below.
def repeats(name, key):
    first, n, differing = {}, 0, []
    for l in open(f"{w}/{name}.jsonl", encoding="utf-8"):
        i = json.loads(l)[key]
        if i not in first:
            first[i] = l
            continue
        n += 1
        if l != first[i]:
            differing.append(i)
    open(f"{w}/{name}.first.jsonl", "w", encoding="utf-8").writelines(first.values())
    return n, differing
rep_u, diff_u = repeats("kill.unique", "id")
rep_d, diff_d = repeats("kill.dups", "post_id")
differing = diff_u + diff_d
print(f"repeated outputs: {rep_u} unique, {rep_d} duplicate events; not byte-identical to the first: {len(differing)}")
for i in differing[:10]:
    print(f"  {i}")
print(f"wall time from start to all verdicts: {elapsed} s")
failed = []
if lost:
    failed.append(f"{len(lost)} lost")
if conflicting:
    failed.append(f"{len(conflicting)} with two different verdicts")
if differing:
    failed.append(f"{len(differing)} repeated outputs not identical to the first")
if same < 0.999 * len(ref):
    failed.append("under 99.9% with the undisturbed verdict")
open(f"{w}/failed", "w").write("; ".join(failed))
PY
[ "$mode" = all ] || grep -h "assigned\|revoked\|rebalance" "$work"/a.log "$work"/b*.log | tail -20 >&2 || true
failed=$(cat "$work/failed")
if [ -n "$failed" ]; then
  # Keep what a failure needs to be explained: the logs and the exports.
  SIMDEDUP_BENCH_KEEP=1
  echo "check failed: work dir kept, $work" >&2
fi
truth=$(dirname "$input")/truth.jsonl
score=$(dirname "$input")/../score.py
if [ -f "$truth" ] && [ -f "$score" ]; then
  # At-least-once: each post's first output is scored (kept above), as the issue's measure asks.
  python3 "$score" --truth "$truth" --unique "$work/kill.unique.first.jsonl" \
    --duplicates "$work/kill.dups.first.jsonl" --json-out "$work/score.json" >/dev/null
  python3 - "$work/score.json" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
k = r["recall_by_kind"]
print(f"score.py on the output topics: precision {r['precision']}  recall {r['recall']}  "
      f"light {k.get('light')}  heavy {k.get('heavy')}  lost {r['lost']}  output twice {r['duplicated_outputs']}")
PY
fi
if [ -n "$failed" ]; then
  echo "kafka-check: FAILED: $failed" >&2
  exit 1
fi
