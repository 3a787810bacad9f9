#!/usr/bin/env python3
"""Counts the record batches and records each partition of a topic holds on one broker.

    python3 scripts/topic-batches.py HOST:PORT TOPIC:PARTITIONS [TOPIC:PARTITIONS ...]

Prints one line per topic: batches, records, records per batch, and the most batches in one
partition. tansu 0.6 lists every stored batch of a partition on each fetch that finds new records
(scripts/broker.sh), so this is what a consumer's fetches cost it; bench-live.sh prints it at the
end of a stream. Reads each partition from offset 0 with Fetch v4 requests (the protocol's own
batch headers; no client library needed), so it suits a single broker (tansu, the mock broker,
a one-node Kafka): every partition must be led by the broker named.
"""
import socket
import struct
import sys

CLIENT_ID = b"simdedup-topic-batches"
MAX_BYTES = 50 << 20
# Offset (24), batch length and the rest of a v2 batch header up to its record count: a batch is
# at least this long.
BATCH_HEADER = 61


class BrokerError(Exception):
    pass


def recv_exactly(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise BrokerError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def request(sock, correlation, api_key, version, body):
    header = struct.pack(">hhih", api_key, version, correlation, len(CLIENT_ID)) + CLIENT_ID
    msg = header + body
    sock.sendall(struct.pack(">i", len(msg)) + msg)
    (size,) = struct.unpack(">i", recv_exactly(sock, 4))
    resp = recv_exactly(sock, size)
    (got,) = struct.unpack_from(">i", resp, 0)
    if got != correlation:
        raise BrokerError(f"response {got} to request {correlation}")
    return resp[4:]


def fetch(sock, correlation, topic, partition, offset):
    """Batches of `topic` `partition` from `offset`: [(base offset, records)]."""
    name = topic.encode()
    body = struct.pack(">iiiib", -1, 0, 0, MAX_BYTES, 0)  # replica, wait, min, max, isolation
    body += struct.pack(">ih", 1, len(name)) + name
    body += struct.pack(">iiqi", 1, partition, offset, MAX_BYTES)
    r = request(sock, correlation, 1, 4, body)
    i = 4  # throttle time
    (topics,) = struct.unpack_from(">i", r, i)
    i += 4
    if topics != 1:
        raise BrokerError(f"{topic}: {topics} topics in a fetch response for one")
    (n,) = struct.unpack_from(">h", r, i)
    i += 2 + n + 4  # name, partition count
    _, error, _, _ = struct.unpack_from(">ihqq", r, i)
    i += 22
    if error:
        raise BrokerError(f"{topic} [{partition}]: Kafka error code {error} at offset {offset}")
    (aborted,) = struct.unpack_from(">i", r, i)
    i += 4 + 16 * max(aborted, 0)
    (size,) = struct.unpack_from(">i", r, i)
    i += 4
    records = r[i : i + max(size, 0)]
    batches, j = [], 0
    while j + BATCH_HEADER <= len(records):
        base, length = struct.unpack_from(">qi", records, j)
        if j + 12 + length > len(records):
            break  # a partial batch at the end of the response
        (last_delta,) = struct.unpack_from(">i", records, j + 23)
        batches.append((base, last_delta + 1))
        j += 12 + length
    return batches


def count(sock, topic, partitions):
    """Per partition (batches, records), reading each from offset 0 to its end."""
    out, correlation = [], 0
    for p in range(partitions):
        offset, nb, nr = 0, 0, 0
        while True:
            correlation += 1
            batches = [b for b in fetch(sock, correlation, topic, p, offset) if b[0] >= offset]
            if not batches:
                break
            for base, n in batches:
                nb, nr, offset = nb + 1, nr + n, base + n
        out.append((nb, nr))
    return out


def main(argv):
    if len(argv) < 3 or any(":" not in a for a in argv[1:]):
        print("usage: " + __doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    host, _, port = argv[1].split(",")[0].rpartition(":")
    try:
        sock = socket.create_connection((host, int(port)), timeout=30)
        for arg in argv[2:]:
            topic, _, n = arg.rpartition(":")
            per = count(sock, topic, int(n))
            batches, records = sum(b for b, _ in per), sum(r for _, r in per)
            each = f"{records / batches:.1f}" if batches else "-"
            print(
                f"{topic}: {batches} batches, {records} records ({each} per batch), "
                f"at most {max(b for b, _ in per)} batches in one of {n} partitions"
            )
    except (OSError, BrokerError, struct.error, ValueError) as e:
        print(f"topic-batches.py: {argv[1]}: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
