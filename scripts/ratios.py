#!/usr/bin/env python3
"""The summary of a side-by-side benchmark (scripts/bench-ratio.sh, scripts/bench-passthrough.sh):
RATES holds one line per round, "A B" (the baseline's rate, then the measured one). Prints both
medians, the ratio of the medians and the median of the per-round ratios, the figure to quote:
both runs of a round see the same machine.
    scripts/ratios.py RATES NAME_A NAME_B UNIT"""
import statistics
import sys


def main() -> None:
    if len(sys.argv) != 5:
        sys.exit(__doc__.strip().splitlines()[-1].strip())
    rates, name_a, name_b, unit = sys.argv[1:]
    a, b = zip(*(map(int, line.split()) for line in open(rates) if line.strip()))
    ratios = [y / x for x, y in zip(a, b)]
    ma, mb = statistics.median(a), statistics.median(b)
    print(f"medians over {len(ratios)} rounds: {name_a} {ma:.0f} {unit}, {name_b} {mb:.0f} {unit}; "
          f"ratio of the medians {mb / ma:.2f}")
    print(f"median of the per-round ratios: {statistics.median(ratios):.2f} "
          f"(from {min(ratios):.2f} to {max(ratios):.2f})")


if __name__ == "__main__":
    main()
