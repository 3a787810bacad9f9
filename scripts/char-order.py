#!/usr/bin/env python3
"""Writes src/index/char_order.txt: the characters of jieba's dictionary, most frequent first.

The bigram index orders a post's character bigrams from rarest to most common and indexes only
the rarest few (prefix filtering, src/index/order.rs). Any fixed order keeps the filter complete;
a frequency order keeps the posting lists short. Character frequency here is the sum of the
frequencies of the dictionary words that contain the character (jieba's dict.txt, the dictionary
the tokenizer itself uses), so the order is general Chinese usage, not any one data set.

  python3 scripts/char-order.py [path/to/jieba-rs/src/data/dict.txt]
(default: the jieba-rs source cargo fetched into ~/.cargo/registry).
"""
import collections
import glob
import os
import sys

here = os.path.dirname(os.path.abspath(__file__))
paths = sys.argv[1:] or sorted(glob.glob(os.path.expanduser(
    "~/.cargo/registry/src/*/jieba-rs-*/src/data/dict.txt")))
if not paths:
    sys.exit("jieba's dict.txt not found: run cargo build first, or pass its path")
freq = collections.Counter()
with open(paths[-1], encoding="utf-8") as f:
    for line in f:
        parts = line.split()
        if len(parts) < 2:
            continue
        word, n = parts[0].lower(), int(parts[1])
        for c in word:
            # Normalized text keeps letters and digits only; ASCII is handled in order.rs.
            if c.isalnum() and not c.isascii():
                freq[c] += n
chars = [c for c, _ in sorted(freq.items(), key=lambda kv: (-kv[1], kv[0]))]
out = os.path.join(here, "..", "src", "index", "char_order.txt")
with open(out, "w", encoding="utf-8") as f:
    for i in range(0, len(chars), 64):
        f.write("".join(chars[i:i + 64]) + "\n")
print(f"{len(chars)} characters from {paths[-1]} -> {os.path.relpath(out)}")
