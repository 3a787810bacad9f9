#!/usr/bin/env bash
# Live latency of the Kafka topology on a local broker (tansu; SIMDEDUP_BENCH_BROKER=mock for
# librdkafka's mock broker, see bench-env.sh): `simdedup generate` writes posts into an
# 8-partition raw topic at RATE posts/s for SECS seconds, with event times that follow
# the wall clock (--start now --event-rate RATE), while the workers decide them. Latency of a
# post = the Kafka timestamp of its output record (unique, duplicate event or rejection) minus
# its raw record's, both read back with `simdedup export --timestamps`.
#   scripts/bench-live.sh WORKERS RATE SECS
# WORKERS: `all` (one `run --role all`) or N (one `run --role route` and N `run --role dedup`
# workers in one group). Prints posts produced and decided, lost posts, repeated outputs (and
# whether repeats are identical), latency p50/p90/p99/p99.9/max, the rate achieved, CPU seconds
# per 1,000 posts of each worker and (while the stream is produced) of the broker, the same as a
# share of one core at the input rate, and each worker's
# simdedup_end_to_end_latency_seconds and simdedup_received_latency_seconds (per stage): mean
# and the bucket bounds of p50 and p99; and the record batches the raw, routed and changelog
# topics hold after the stream (scripts/topic-batches.py: each of tansu's fetches lists them);
# writes summary.json to the work dir (and to $SIMDEDUP_LIVE_OUT if set).
# The workers run for SIMDEDUP_LIVE_WARMUP seconds (default 5) before the stream starts, as
# long-running workers would (over its second half it prints the CPU the broker and each worker
# spend with no posts, % of one core: the cost of polling alone); SIMDEDUP_LIVE_TIMEOUT
# (default 300) bounds the wait for the last verdict; SIMDEDUP_BENCH_KEEP=1 keeps the work dir (logs, exports); SIMDEDUP_LIVE_CONFIG is
# TOML appended to the workers' config (e.g. $'[kafka.consumer]\n"fetch.wait.max.ms" = "25"').
# SIMDEDUP_LIVE_KILL=SECS kills the last dedup worker (kill -9) SECS seconds into the stream
# (WORKERS 2 or more): the p99 per 10 s of input then shows how long its posts, and the others'
# waiting on them, took to fail over. SIMDEDUP_BENCH_STORAGE=memory runs tansu on its in-memory
# storage (bench-env.sh; not with SIMDEDUP_LIVE_KILL), to tell its SQLite storage's cost from
# the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
usage() { echo "usage: $0 all|N RATE SECS" >&2; exit 2; }
[ $# -eq 3 ] || usage
workers=$1 rate=$2 secs=$3
[[ $workers == all || $workers =~ ^[1-9][0-9]*$ ]] || usage
[[ $rate =~ ^[1-9][0-9]*$ && $secs =~ ^[1-9][0-9]*$ ]] || usage
count=$((rate * secs))
warmup=${SIMDEDUP_LIVE_WARMUP:-5}
timeout=${SIMDEDUP_LIVE_TIMEOUT:-300}
source scripts/bench-env.sh
[ -z "${SIMDEDUP_LIVE_KILL:-}" ] || bench_sqlite_only SIMDEDUP_LIVE_KILL
bench_start live.posts:8 live.routed:8 live.unique:8 live.duplicates:8 live.rejected:8 \
  live.changelog:1

cat > "$work/config.toml" <<'TOML'
[kafka]
group_id = "live"
input_topic = "live.posts"
routed_topic = "live.routed"
unique_topic = "live.unique"
duplicates_topic = "live.duplicates"
rejected_topic = "live.rejected"
changelog_topic = "live.changelog"
routed_partitions = 8
TOML
printf '%s\n' "${SIMDEDUP_LIVE_CONFIG:-}" >> "$work/config.toml"
# The raw topic exists, with 8 partitions, before the workers subscribe.
"$bin" produce --topic live.posts --partitions 8 --input /dev/null

start() { # name role
  "$bin" run --role "$2" --config "$work/config.toml" --metrics-addr 127.0.0.1:0 \
    2> "$work/$1.log" &
  pids+=($!)
  names+=("$1")
}
names=()
if [ "$workers" = all ]; then
  start all all
else
  start route route
  for i in $(seq "$workers"); do start "dedup$i" dedup; done
fi
addr() { sed -n 's/.*metrics listening address=\([0-9.:]*\).*/\1/p' "$work/$1.log" | head -1; }
for n in "${names[@]}"; do
  for _ in $(seq 120); do
    a=$(addr "$n")
    [ -n "$a" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$a/health")" = 200 ] && break
    sleep 0.5
  done
  a=$(addr "$n")
  if [ -z "$a" ] || [ "$(curl -s -o /dev/null -w '%{http_code}' "http://$a/health")" != 200 ]; then
    echo "worker $n not ready after 60 s; its log ends:" >&2
    tail -n 20 "$work/$n.log" >&2
    exit 1
  fi
done
cpu() { # pid -> CPU seconds (utime + stime)
  awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"
}
broker_pid=$(cat "$SIMDEDUP_RUN/broker.pid")
# The second half of the warm-up, with the workers ready and no posts yet: what polling alone
# costs the broker and each worker.
sleep "$(python3 -c "print($warmup / 2)")"
idle0=("$(cpu "$broker_pid")")
for p in "${pids[@]}"; do idle0+=("$(cpu "$p")"); done
t_idle=$(date +%s.%N)
sleep "$(python3 -c "print($warmup / 2)")"
idle1=("$(cpu "$broker_pid")")
for p in "${pids[@]}"; do idle1+=("$(cpu "$p")"); done
python3 - "$(date +%s.%N)" "$t_idle" "broker ${names[*]}" "${idle0[*]}" "${idle1[*]}" <<'PY'
import sys
secs = float(sys.argv[1]) - float(sys.argv[2])
names, a, b = sys.argv[3].split(), sys.argv[4].split(), sys.argv[5].split()
cores = ", ".join(f"{n} {100 * (float(y) - float(x)) / secs:.1f}%" for n, x, y in zip(names, a, b))
print(f"idle before the stream ({secs:.1f} s, no posts), % of one core: {cores}")
PY
broker0=$(cpu "$broker_pid")
echo "streaming $count posts at $rate/s into live.posts (workers: $workers)" >&2
if [ -n "${SIMDEDUP_LIVE_KILL:-}" ]; then
  [[ $SIMDEDUP_LIVE_KILL =~ ^[0-9]+$ && $workers =~ ^[0-9]+$ && $workers -ge 2 ]] || {
    echo "SIMDEDUP_LIVE_KILL: seconds, with 2 or more dedup workers" >&2
    exit 2
  }
  victim=${pids[-1]} victim_name=${names[-1]}
  (sleep "$SIMDEDUP_LIVE_KILL" && kill -9 "$victim" &&
    echo "killed $victim_name (kill -9) $SIMDEDUP_LIVE_KILL s into the stream" >&2) &
  killer=$!
fi
"$bin" generate --count "$count" --rate "$rate" --event-rate "$rate" --start now \
  --topic live.posts --partitions 8 --brokers "$SIMDEDUP_BROKERS" >&2
broker1=$(cpu "$broker_pid")

export_all() {
  for t in unique duplicates rejected; do
    "$bin" export --topic "live.$t" --idle-ms 1500 --timestamps --output "$work/$t.tsv" 2>/dev/null
  done
  cat "$work/unique.tsv" "$work/duplicates.tsv" "$work/rejected.tsv" | wc -l
}
waited=0
while :; do
  got=$(export_all)
  [ "$got" -ge "$count" ] && break
  if [ "$waited" -ge "$timeout" ]; then
    echo "after ${timeout} s: $got outputs for $count posts" >&2
    break
  fi
  sleep 5
  waited=$((waited + 5))
done
"$bin" export --topic live.posts --idle-ms 1500 --timestamps --output "$work/raw.tsv" 2>/dev/null
# What each of tansu's fetches lists by now (scripts/topic-batches.py).
python3 scripts/topic-batches.py "$SIMDEDUP_BROKERS" live.posts:8 live.routed:8 live.changelog:1 \
  > "$work/batches.txt" || true
[ -z "${killer:-}" ] || kill "$killer" 2>/dev/null || true

{
  for i in "${!names[@]}"; do
    n=${names[$i]}
    # A worker killed by SIMDEDUP_LIVE_KILL has neither CPU figures nor metrics any more.
    kill -0 "${pids[$i]}" 2>/dev/null || continue
    echo "cpu ${n} $(cpu "${pids[$i]}")"
    curl -s "http://$(addr "$n")/metrics" |
      grep -E '^simdedup_(end_to_end|received)_latency_seconds_(bucket|sum)' | sed "s/^/hist $n /" || true
  done
  echo "cpu broker $(python3 -c "print($broker1 - $broker0)")"
} > "$work/workers.txt"
for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
pids=()

python3 - "$work" "$workers" "$rate" "$secs" "${SIMDEDUP_LIVE_OUT:-}" <<'PY'
import json, sys, collections
work, workers, rate, secs, extra = sys.argv[1:6]

def rows(name):
    for line in open(f"{work}/{name}.tsv", encoding="utf-8", errors="replace"):
        ms, _, value = line.rstrip("\n").partition("\t")
        yield int(ms), value

raw = {}
for ms, v in rows("raw"):
    raw[str(json.loads(v)["id"])] = ms
outs = collections.defaultdict(list)
for name, key in (("unique", "id"), ("duplicates", "post_id"), ("rejected", "id")):
    for ms, v in rows(name):
        pid = json.loads(v).get(key)
        outs[str(pid)].append((ms, v))
by_input = sorted((t, min(ms for ms, _ in outs[p]) - t) for p, t in raw.items() if p in outs)
lat = sorted(l for _, l in by_input)
lost = sum(1 for p in raw if p not in outs)
repeated = [p for p, o in outs.items() if len(o) > 1]
differing = sum(1 for p in repeated if len({v for _, v in outs[p]}) > 1)
def q(f):
    return lat[min(len(lat) - 1, int(f * len(lat)))] if lat else None
times = sorted(raw.values())
span = (times[-1] - times[0]) / 1000 if len(times) > 1 else 0
# p99 per 10 s of input time: shows whether a tail is start-up, steady or a stall.
windows = collections.defaultdict(list)
for t, l in by_input:
    windows[(t - by_input[0][0]) // 10000].append(l)
p99_by_10s = [sorted(v)[int(0.99 * len(v))] for _, v in sorted(windows.items())]
cpu, sums, hist = {}, {}, collections.defaultdict(list)
for line in open(f"{work}/workers.txt"):
    parts = line.split()
    if parts[0] == "cpu":
        cpu[parts[1]] = float(parts[2])
    elif parts[0] == "hist":
        name = parts[2].split("_latency")[0].removeprefix("simdedup_")
        if 'stage="' in parts[2]:
            name += " by " + parts[2].split('stage="')[1].split('"')[0]
        if "_sum" in parts[2]:
            sums[f"{parts[1]} {name}"] = float(parts[3])
            continue
        hist[f"{parts[1]} {name}"].append(
            (parts[2].split('le="')[1].split('"')[0], int(float(parts[3]))))
s = {
    "workers": workers, "rate": int(rate), "secs": int(secs),
    "produced": len(raw), "decided": len(lat), "lost": lost,
    "repeated": len(repeated), "repeated_differing": differing,
    "input_rate": round(len(raw) / span) if span else None,
    "latency_ms": {"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p99.9": q(0.999),
                   "max": lat[-1] if lat else None},
    "p99_ms_by_10s_of_input": p99_by_10s,
    "cpu_secs_per_1000_posts": {n: round(c / max(1, len(raw)) * 1000, 3) for n, c in cpu.items()},
    "latency_histograms": dict(hist),
}
out = json.dumps(s, indent=1)
open(f"{work}/summary.json", "w").write(out)
if extra:
    open(extra, "w").write(out)
l = s["latency_ms"]
print(f"workers {workers}: {s['produced']} posts at {s['input_rate']}/s, {s['decided']} decided, "
      f"{lost} lost, {len(repeated)} repeated ({differing} differing); latency ms p50 {l['p50']} "
      f"p90 {l['p90']} p99 {l['p99']} p99.9 {l['p99.9']} max {l['max']}")
print("p99 ms per 10 s of input: " + " ".join(map(str, p99_by_10s)))
print("CPU s per 1,000 posts: " + ", ".join(f"{n} {v}" for n, v in s["cpu_secs_per_1000_posts"].items()))
# The same at the input rate, as a share of one core: a broker near 100% is the bound (tansu on
# SQLite serves requests on about one core).
if s["input_rate"]:
    print("at the input rate, of one core: " + ", ".join(
        f"{n} {v * s['input_rate'] / 10:.0f}%" for n, v in s["cpu_secs_per_1000_posts"].items()))
for n, b in hist.items():
    if not b or b[-1][1] == 0:
        continue
    total = b[-1][1]
    # The bucket bound under which half and 99% of the posts fall.
    at = lambda f: next(le for le, c in b if c >= f * total)
    mean = sums.get(n, 0) / total * 1000
    print(f"{n} latency (worker histogram): mean {mean:.0f} ms, p50 <= {at(0.5)} s, "
          f"p99 <= {at(0.99)} s, {total} posts")
PY
sed 's/^/record batches stored: /' "$work/batches.txt"
