#!/usr/bin/env bash
# Backlog throughput of the dedup stage with one or several dedup workers, on a local broker
# (tansu unless SIMDEDUP_BENCH_BROKER=mock): the dev stream xCOPIES (scripts/copies.py) is
# produced to an 8-partition raw topic first; then WORKERS dedup workers (one group) start
# and, once the group has settled (every worker holds its partitions), one route worker. Prints
# how long the group took to settle, the rate from the route worker's start (or, with
# SIMDEDUP_BACKLOG_ROUTED, from the dedup workers' going on) to the last verdict,
# each worker's CPU seconds per 1,000 posts from then on (not joining the group) and, split by
# thread name (its own threads, librdkafka's, the others), in microseconds per post, and each dedup
# worker's share of wall time spent waiting on the global order
# (simdedup_order_wait_seconds_total: posts buffered, none allowed yet) and how many posts it
# decided ahead of their turn (simdedup_decided_ahead_total), how many posts waited and for how
# long on average (simdedup_post_wait_seconds), and how long other workers' progress markers
# took to reach it (simdedup_marker_delay_seconds). It prints the drain rate, between 5% and 95%
# of the verdicts acknowledged (and the same span by the output records' timestamps, read back
# at the end); meanwhile the share of the machine's CPU time in use, each process's CPU seconds
# per 1,000 posts decided meanwhile (when the machine's cores are all in use, a second worker
# cannot add throughput, only its own cost) and each dedup worker's share of that time spent
# waiting on the order; at the end, each worker's peak resident memory (VmHWM).
#   scripts/bench-backlog.sh WORKERS [COPIES] [POSTS.jsonl]
# Defaults: 4 copies of ../shared/bench/weibo-dev-small/posts.jsonl (196,252 posts).
# SIMDEDUP_BENCH_BROKER=mock runs it on librdkafka's mock broker instead of tansu (bench-env.sh),
# SIMDEDUP_BENCH_STORAGE=memory on tansu's in-memory storage instead of SQLite;
# SIMDEDUP_BACKLOG_TIMEOUT (seconds, default 1800) bounds the wait; SIMDEDUP_BENCH_KEEP=1 keeps
# the work dir; SIMDEDUP_BACKLOG_PARTITIONS sets kafka.routed_partitions (default 8; the raw
# topic keeps 8; on the mock broker, 5 MB per partition at most, the dev stream x4 needs 8);
# SIMDEDUP_BACKLOG_CONFIG is TOML appended to the workers' config (e.g.
# $'[kafka.consumer]\n"fetch.wait.max.ms" = "25"'). SIMDEDUP_BACKLOG_ROUTED=1 times the dedup stage
# alone: the settled dedup workers are stopped (SIGSTOP) while the route worker routes the whole
# backlog, the route worker is then stopped, and the dedup workers go on (SIGCONT) with the whole
# routed backlog before them; the times count from then (on the mock broker: routing on tansu
# may outlast the group's 45 s session timeout). SIMDEDUP_BACKLOG_CORES=1 confines each dedup
# worker to one core of its own (`taskset`; worker i to core i-1, modulo the cores), the broker
# and the route worker unconfined: with one worker, the rate one core gives; with as many as the
# cores, what adding a worker with a core of its own gives.
set -euo pipefail
cd "$(dirname "$0")/.."
workers=${1:-}
copies=${2:-4}
input=${3:-../shared/bench/weibo-dev-small/posts.jsonl}
[[ $workers =~ ^[1-9][0-9]*$ && $copies =~ ^[1-9][0-9]*$ ]] || {
  echo "usage: $0 WORKERS [COPIES] [POSTS.jsonl]" >&2
  exit 2
}
timeout=${SIMDEDUP_BACKLOG_TIMEOUT:-1800}
routed=${SIMDEDUP_BACKLOG_PARTITIONS:-8}
prerouted=${SIMDEDUP_BACKLOG_ROUTED:-}
# While stopped, the dedup workers see no routed record arrive: keep them from taking their
# partitions for idle when they go on.
idle_ms=$([ -n "$prerouted" ] && echo 120000 || echo 10000)
[[ $routed =~ ^[1-9][0-9]*$ ]] || { echo "SIMDEDUP_BACKLOG_PARTITIONS: a partition count" >&2; exit 2; }
source scripts/bench-env.sh
bench_start backlog.posts:8 "backlog.routed:$routed" backlog.unique:8 backlog.duplicates:8 \
  backlog.rejected:8 backlog.changelog:1
names=()
# The route worker starts only after the dedup group settles: keep its empty routed partitions
# from counting as idle before routing begins (README, Limits).
cat > "$work/config.toml" <<TOML
[kafka]
group_id = "backlog"
input_topic = "backlog.posts"
routed_topic = "backlog.routed"
unique_topic = "backlog.unique"
duplicates_topic = "backlog.duplicates"
rejected_topic = "backlog.rejected"
changelog_topic = "backlog.changelog"
routed_partitions = $routed
idle_after_ms = $idle_ms
TOML
printf '%s\n' "${SIMDEDUP_BACKLOG_CONFIG:-}" >> "$work/config.toml"
python3 scripts/copies.py "$input" "$copies" > "$work/stream.jsonl"
n=$(wc -l < "$work/stream.jsonl")
"$bin" produce --topic backlog.posts --partitions 8 --input "$work/stream.jsonl"

if [ -n "${SIMDEDUP_BACKLOG_CORES:-}" ]; then
  command -v taskset >/dev/null || { echo "SIMDEDUP_BACKLOG_CORES needs taskset (util-linux)" >&2; exit 2; }
fi
start() { # name role [core]
  local pin=()
  [ -n "${3:-}" ] && pin=(taskset -c "$3")
  "${pin[@]}" "$bin" run --role "$2" --config "$work/config.toml" --metrics-addr 127.0.0.1:0 \
    2> "$work/$1.log" &
  pids+=($!)
  names+=("$1")
}
for i in $(seq "$workers"); do
  core=
  [ -n "${SIMDEDUP_BACKLOG_CORES:-}" ] && core=$(( (i - 1) % $(nproc) ))
  start "dedup$i" dedup "$core"
done
# Settled: each worker's latest rebalance event assigns it partitions, all of them in all.
settled() {
  local total=0 i last
  for i in $(seq "$workers"); do
    last=$(grep 'rebalance .*event=' "$work/dedup$i.log" | tail -1)
    [[ $last == *Assigned* ]] || return 1
    total=$((total + $(sed 's/.*Assigned(\[\(.*\)\]).*/\1/' <<< "$last" | tr ',' '\n' | grep -c '[0-9]')))
  done
  [ "$total" -eq "$routed" ]
}
# Usually within 4 s. On librdkafka's mock broker (2.12) a follower whose SyncGroup comes back
# with an error rejoins, and the mock then holds that rebalance for the session timeout (45 s):
# about a third of two-worker starts here settled only after 48 s. Wait that out, and say so.
s0=$(date +%s.%N)
for _ in $(seq 1200); do
  settled && break
  sleep 0.1
done
settled || { echo "the dedup group did not settle within 120 s" >&2; exit 1; }
echo "the dedup group settled $(python3 -c "print(round($(date +%s.%N) - $s0, 1))") s after its workers started"
sleep 1
settled || { echo "the dedup group did not stay settled" >&2; exit 1; }
addr() { sed -n 's/.*metrics listening address=\([0-9.:]*\).*/\1/p' "$work/$1.log" | head -1; }
metric() { # name metric -> value (0 if absent)
  { curl -s "http://$(addr "$1")/metrics" 2>/dev/null || true; } | awk -v m="$2" '$1 == m {print $2; f=1} END {if (!f) print 0}'
}
if [ -n "$prerouted" ]; then
  for p in "${pids[@]}"; do kill -STOP "$p"; done
  start route route
  # Routed: every post read, and no envelope acknowledged for a second.
  routed_in() { [ "$(metric route simdedup_posts_in_total)" -ge "$n" ]; }
  for _ in $(seq "$((timeout * 10))"); do
    routed_in && break
    sleep 0.1
  done
  routed_in || { echo "the route worker did not read the backlog within $timeout s" >&2; exit 1; }
  acked=-1
  while [ "$(metric route simdedup_outputs_acked_total)" != "$acked" ]; do
    acked=$(metric route simdedup_outputs_acked_total)
    sleep 1
  done
  echo "the route worker routed $(metric route simdedup_posts_in_total) posts in $acked envelopes; the dedup workers go on"
  kill -KILL "${pids[-1]}"
  wait "${pids[-1]}" 2>/dev/null || true
  unset 'pids[-1]' 'names[-1]'
fi
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{print ($14 + $15) / hz}' "/proc/$1/stat"; }
broker_cpu() { proc_cpu "$(cat "$SIMDEDUP_RUN/broker.pid")"; }
b0=$(broker_cpu)
# Each dedup worker's CPU is counted from here: not what it spent joining the group and waiting
# for it to settle.
cpu0=()
for p in "${pids[@]}"; do cpu0+=("$(proc_cpu "$p")"); done
# And by thread: each worker's threads with their CPU ticks (utime + stime; a thread's name may
# hold spaces, so the fields are counted from the end of the name).
threads_cpu() {
  local p t s f
  for p in "${pids[@]}"; do
    for t in /proc/"$p"/task/*; do
      s=$(cat "$t/stat" 2>/dev/null) || continue
      s=${s##*) }
      read -ra f <<< "$s"
      echo "$p ${t##*/} $((f[11] + f[12])) $(tr ' ' _ < "$t/comm")"
    done
  done
}
threads_cpu > "$work/threads0"
t0=$(date +%s.%N)
if [ -n "$prerouted" ]; then
  for p in "${pids[@]}"; do kill -CONT "$p"; done
else
  start route route
fi
# Samples (seconds since the route worker's start or the dedup workers' going on, verdicts out,
# then CPU seconds: broker, machine, each worker; then each dedup worker's seconds waiting on the
# order), every 0.1 s, for the drain rate: a lone worker drains the dev stream x4 in about 1.5 s,
# which samples 0.5 s apart cut into three or four. One sampling process for the whole run: a
# shell loop starting interpreters and curl twice a second took a fifth of this machine.
dedup_addrs=()
for i in $(seq "$workers"); do dedup_addrs+=("$(addr "dedup$i")"); done
: > "$work/samples"
# It stops early when the dedup workers' logs show routed records gone from the broker before
# they were read: librdkafka's mock broker keeps at most 5 MB per partition and drops the oldest
# records past that, so a backlog routed into fewer partitions (SIMDEDUP_BACKLOG_PARTITIONS) or
# more copies can outgrow it, and the verdicts would never all come; it then exits with 3.
sampler=0
python3 - "$work/samples" "$n" "$timeout" "$t0" "$(cat "$SIMDEDUP_RUN/broker.pid")" \
  "${pids[*]}" "$work" "${dedup_addrs[@]}" <<'PY' || sampler=$?
import glob, os, sys, time, urllib.request
out, n, timeout, t0, broker, pids = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4]), sys.argv[5], sys.argv[6].split()
work, addrs = sys.argv[7], sys.argv[8:]
def routed_lost():  # a dedup worker found its routed partition's start deleted
    for path in glob.glob(f"{work}/dedup*.log"):
        for line in open(path, errors="replace"):
            if "backlog.routed" in line and "Offset out of range" in line:
                return line.strip()
    return None
hz = os.sysconf("SC_CLK_TCK")
def cpu(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / hz
    except OSError:
        return 0.0
def machine():  # CPU seconds the whole machine spent busy (every core: all but idle and iowait)
    f = open("/proc/stat").readline().split()
    return sum(int(f[i]) for i in (1, 2, 3, 6, 7, 8)) / hz
def scrape(addr):  # (verdicts acknowledged, seconds waiting on the order)
    try:
        body = urllib.request.urlopen(f"http://{addr}/metrics", timeout=2).read().decode()
    except OSError:
        return 0, 0.0
    got, waited = 0, 0.0
    for line in body.splitlines():
        if line.startswith("simdedup_outputs_acked_total "):
            got = int(float(line.split()[1]))
        elif line.startswith("simdedup_order_wait_seconds_total "):
            waited = float(line.split()[1])
    return got, waited
with open(out, "w") as f:
    while True:
        time.sleep(0.1)
        scraped = [scrape(a) for a in addrs]
        got = sum(g for g, _ in scraped)
        elapsed = time.time() - t0
        row = [round(elapsed, 2), got, cpu(broker), machine(), *map(cpu, pids)]
        f.write(" ".join(map(str, row + [w for _, w in scraped])) + "\n")
        f.flush()
        if got >= n:
            break
        if elapsed >= timeout:
            print(f"after {timeout:.0f} s: {got} of {n} verdicts out", file=sys.stderr)
            break
        if round(elapsed * 10) % 10 == 0 and (lost := routed_lost()):
            print(f"routed records were deleted before a dedup worker read them ({got} of {n} "
                  f"verdicts out); the broker's partitions are too small for this backlog "
                  f"(librdkafka's mock broker keeps 5 MB each: use more routed partitions, "
                  f"fewer copies, or tansu):\n{lost}", file=sys.stderr)
            sys.exit(3)
PY
[ "$sampler" -ne 3 ] || exit 1
got=$(tail -1 "$work/samples" | cut -d' ' -f2)
t1=$(date +%s.%N)
threads_cpu > "$work/threads1"
b1=$(broker_cpu)
cpu1=()
for p in "${pids[@]}"; do cpu1+=("$(proc_cpu "$p")"); done
wall=$(python3 -c "print(round($t1 - $t0, 1))")
echo "workers $workers: $got of $n verdicts out (acknowledged) in $wall s: $(python3 -c "print(round($got / ($t1 - $t0)))") posts/s"
# The drain rate leaves out the start (group join of the route worker, first envelopes) and the
# end (the last posts wait kafka.idle_after_ms for the other partitions to fall idle). It counts
# acknowledged verdicts: the moments 5% and 95% of them were out are interpolated between the
# two samples around each (samples 0.1 s apart, taken as the nearer one after, cut a lone
# worker's 0.7 s between 5% and 95% too coarsely: each end up to 0.1 s off). The CPU and the
# waits come from those samples. Beside it, the same span timed by the output records' own
# Kafka timestamps, read back once the drain is over: when each verdict went to the producer,
# which is when it was acknowledged too where the broker keeps up (the mock broker), and
# earlier where it does not (tansu on SQLite).
for t in unique duplicates rejected; do
  "$bin" export --topic "backlog.$t" --idle-ms 500 --timestamps --output "$work/$t.tsv" 2>/dev/null
done
cut -f1 "$work/unique.tsv" "$work/duplicates.tsv" "$work/rejected.tsv" > "$work/out-ms"
python3 - "$n" "$work/samples" "$(nproc)" "${names[*]}" "$workers" "$work/out-ms" <<'PY'
import sys
n, cores, names, dedups = int(sys.argv[1]), int(sys.argv[3]), sys.argv[4].split(), int(sys.argv[5])
# Each sample: seconds, verdicts out, broker CPU, machine CPU, each worker's CPU (the dedup
# workers', then the route worker's), then each dedup worker's seconds waiting on the order.
s = [list(map(float, l.split())) for l in open(sys.argv[2])]
def when(frac):
    """The first sample with frac of the verdicts out, and the moment frac of them were out,
    interpolated between it and the sample before it."""
    i = next((i for i, x in enumerate(s) if x[1] >= frac * n), None)
    if i is None:
        return None, None
    after, before = s[i], s[i - 1] if i > 0 else None
    if before is None or after[1] == before[1]:
        return after, after[0]
    return after, before[0] + (frac * n - before[1]) / (after[1] - before[1]) * (after[0] - before[0])
(a, t5), (b, t95) = when(0.05), when(0.95)
ms = sorted(int(l) for l in open(sys.argv[6]) if l.strip())
i5, i95 = -(-n * 5 // 100) - 1, -(-n * 95 // 100) - 1
if len(ms) < n:
    stamped = f"; {len(ms)} output records read back for {n} posts"
elif ms[0] <= 0:
    stamped = "; the output records carry no timestamps"
elif ms[i95] > ms[i5]:
    stamped = (f"; by the output records' timestamps {round((i95 - i5) / ((ms[i95] - ms[i5]) / 1000))} "
               f"posts/s ({(ms[i95] - ms[i5]) / 1000:.3f} s)")
else:
    stamped = ""
if a is not None and b is not None and t95 > t5:
    print(f"drain rate, 5% to 95% of the verdicts out: {round(0.9 * n / (t95 - t5))} posts/s "
          f"(acknowledged, {t5:.2f} s to {t95:.2f} s after the start{stamped})")
if a is not None and b is not None and b[0] > a[0]:
    posts, secs = b[1] - a[1], b[0] - a[0]
    per = lambda i: (b[i] - a[i]) / posts * 1000
    print(f"samples from {a[0]:.1f} s to {b[0]:.1f} s: broker CPU {per(2):.3f} s per 1,000 posts, "
          f"{100 * (b[2] - a[2]) / secs:.0f}% of one core")
    workers = ", ".join(f"{nm} {per(4 + i):.3f}" for i, nm in enumerate(names))
    print(f"meanwhile the machine's {cores} cores were {100 * (b[3] - a[3]) / (secs * cores):.0f}% busy: "
          f"{per(3):.3f} CPU s per 1,000 posts in all; workers' CPU s per 1,000 posts: {workers}")
    w0 = 4 + len(names)
    waits = ", ".join(f"{names[i]} {100 * (b[w0 + i] - a[w0 + i]) / secs:.0f}%" for i in range(dedups))
    print(f"meanwhile each dedup worker waited on the order (posts buffered, none allowed): {waits}")
PY
echo "broker: CPU $(python3 -c "print(round(($b1 - $b0) / $n * 1000, 3))") s per 1,000 posts ($(python3 -c "print(round(100 * ($b1 - $b0) / ($t1 - $t0)))")% of one core)"
# Peak resident memory of each worker so far (VmHWM): buffers of posts waiting for their turn
# show here.
peaks=()
for i in "${!pids[@]}"; do
  peaks+=("${names[$i]} $(awk '/^VmHWM/ {printf "%.0f", $2 / 1024}' "/proc/${pids[$i]}/status" 2>/dev/null || echo "?") MB")
done
echo "peak resident memory (VmHWM): $(IFS=,; echo "${peaks[*]}" | sed 's/,/, /g')"
# Where each worker's CPU went, by thread name, per post of the backlog: `simdedup` (unnamed
# threads: the one that decodes, reads ahead and decides), librdkafka's (rdk:*), the others.
python3 - "$n" "$work/threads0" "$work/threads1" "$(getconf CLK_TCK)" "${pids[*]}" "${names[*]}" <<'PY'
import collections, sys
n, hz, pids, names = int(sys.argv[1]), int(sys.argv[4]), sys.argv[5].split(), sys.argv[6].split()
def load(path):
    ticks = {}
    for line in open(path):
        pid, tid, t, comm = line.split()
        ticks[(pid, tid)] = (int(t), comm)
    return ticks
t0, t1 = load(sys.argv[2]), load(sys.argv[3])
for pid, name in zip(pids, names):
    use = collections.Counter()
    for (p, tid), (t, comm) in t1.items():
        if p != pid:
            continue
        kind = "librdkafka" if comm.startswith("rdk:") else comm
        use[kind] += t - t0.get((p, tid), (0, comm))[0]
    parts = ", ".join(f"{k} {v / hz / n * 1e6:.1f}" for k, v in use.most_common() if v)
    print(f"{name}: CPU us per post of the backlog by thread, until the last verdict: {parts}")
PY
for i in "${!names[@]}"; do
  nm=${names[$i]}
  cpu=$(python3 -c "print(${cpu1[$i]} - ${cpu0[$i]:-0})")
  wait_s=$(metric "$nm" simdedup_order_wait_seconds_total)
  ahead=$(metric "$nm" simdedup_decided_ahead_total)
  waited=$(metric "$nm" simdedup_post_wait_seconds_count)
  waited_s=$(metric "$nm" simdedup_post_wait_seconds_sum)
  markers=$(metric "$nm" simdedup_marker_delay_seconds_count)
  markers_s=$(metric "$nm" simdedup_marker_delay_seconds_sum)
  line="$nm: CPU $(python3 -c "print(round($cpu / $n * 1000, 3))") s per 1,000 posts"
  [ "$nm" = route ] || line+="; waiting on the order $(python3 -c "print(round(100 * $wait_s / ($t1 - $t0), 1))")% of the wall time; $ahead posts decided ahead of their turn; $waited posts waited, $(python3 -c "print(round(1000 * $waited_s / max($waited, 1)))") ms each on average; $markers markers of other workers applied $(python3 -c "print(round(1000 * $markers_s / max($markers, 1), 1))") ms after they were written, on average"
  echo "$line"
done
