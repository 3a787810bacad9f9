#!/usr/bin/env python3
"""Concatenates COPIES copies of a JSONL post stream, for longer benchmark and check runs.

    scripts/copies.py POSTS.jsonl COPIES > OUT.jsonl

Copy c gets ids suffixed with -c and is shifted later in event time by c times the stream's
span plus the 2-day window, so copies never match each other and the whole stays in time
order. No copy may reach the present: those posts would be rejected as from the future.
"""
import json
import sys
import time


def main() -> None:
    if len(sys.argv) != 3:
        sys.exit(__doc__.strip().splitlines()[2].strip())
    posts = [json.loads(l) for l in open(sys.argv[1], encoding="utf-8") if l.strip()]
    copies = int(sys.argv[2])
    times = [p["created_at"] for p in posts]
    shift = max(times) - min(times) + 2 * 86400 + 1
    if max(times) + (copies - 1) * shift > time.time() - 86400:
        sys.exit(f"copies.py: {copies} copies of this stream would reach the future; use fewer")
    for c in range(copies):
        for p in posts:
            q = dict(p, id=f"{p['id']}-{c}", created_at=p["created_at"] + c * shift)
            print(json.dumps(q, ensure_ascii=False))


main()
