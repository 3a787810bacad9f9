#!/usr/bin/env python3
"""The first N posts of ../shared/data/weibo-rumdect in event-time order, as JSON lines in the
generic input format ({"id", "text", "created_at"}), for throughput runs on real text.

    scripts/rumdect.py N [POSTS.jsonl.gz] > OUT.jsonl

Ties in time keep the file's order. Only N posts are held in memory.
"""
import gzip
import heapq
import json
import sys


def main() -> None:
    if len(sys.argv) not in (2, 3) or not sys.argv[1].isdigit():
        sys.exit(__doc__.strip().splitlines()[3].strip())
    n = int(sys.argv[1])
    path = sys.argv[2] if len(sys.argv) == 3 else "../shared/data/weibo-rumdect/posts.jsonl.gz"

    def posts():
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for i, line in enumerate(f):
                p = json.loads(line)
                yield (p["t"], i, p["mid"], p["text"])

    out = sys.stdout
    for t, _, mid, text in heapq.nsmallest(n, posts()):
        out.write(json.dumps({"id": mid, "text": text, "created_at": t}, ensure_ascii=False))
        out.write("\n")


if __name__ == "__main__":
    main()
