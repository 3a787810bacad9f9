#!/usr/bin/env python3
"""A confluent-kafka consume-and-produce loop, the baseline `scripts/bench-kafka.sh` compares
`run --role all` with when SIMDEDUP_BENCH_BASELINE=confluent: copies every record of FROM to
TO (same partition, key and value) until RECORDS have been copied, then flushes and waits to
be stopped (SIGTERM), as `simdedup passthrough` does, so the bench can read its CPU time. Logs in the
form of simdedup's own (an `Assigned` rebalance line, a `progress records=N` line every
10,000), so the bench reads both alike.

    scripts/passthrough.py BROKERS FROM TO RECORDS
"""
import datetime
import signal
import sys

from confluent_kafka import Consumer, Producer


def log(msg: str) -> None:
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")
    print(f"{now}Z  INFO passthrough.py: {msg}", file=sys.stderr, flush=True)


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[6].strip())
    brokers, src, dst, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    consumer = Consumer(
        {
            "bootstrap.servers": brokers,
            "group.id": "passthrough.py",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": True,
            # The settings simdedup's own consumers use (src/io/kafka/client.rs): tansu 0.6
            # answers a fetch with whole partitions, so one response overfills the prefetch
            # queue, and with librdkafka's 1 s `fetch.queue.backoff.ms` the copy then stalled
            # for about a second in many runs (half its rate over 400,000 records).
            "fetch.queue.backoff.ms": 10,
            "fetch.wait.max.ms": 10,
        }
    )
    producer = Producer({"bootstrap.servers": brokers, "linger.ms": 5})

    def assigned(_, parts):
        log(f"rebalance event=Assigned([{', '.join(str(p.partition) for p in parts)}])")

    consumer.subscribe([src], on_assign=assigned)
    copied = 0
    while copied < want:
        for m in consumer.consume(num_messages=1000, timeout=0.5):
            if m.error():
                continue
            while True:
                try:
                    producer.produce(dst, m.value(), m.key(), partition=m.partition())
                    break
                except BufferError:
                    producer.poll(0.01)
            copied += 1
            if copied % 10_000 == 0:
                log(f"progress records={copied}")
        producer.poll(0)
    producer.flush()
    consumer.close()
    log(f"copied records={copied}")
    while True:
        signal.pause()


if __name__ == "__main__":
    main()
