#!/usr/bin/env bash
# Runs every test, both tiers:
#   1. unit, property and integration tests, including the Kafka topology on librdkafka's
#      in-process mock broker (no install needed);
#   2. end-to-end tests against a real Kafka-compatible broker: tansu, installed (once, slow: it is
#      built from crates.io) and started on a free local port by scripts/broker.sh.
# Release builds: jieba is very slow unoptimized. Extra arguments go to both `cargo test` runs.
# --quick (or SIMDEDUP_QUICK=1) runs tier 1 only.
set -euo pipefail
quick=${SIMDEDUP_QUICK:-0}
if [ "${1:-}" = --quick ]; then quick=1; shift; fi
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
bash scripts/check-deps.sh
cargo test --release --locked "$@"
if [ "$quick" = 1 ]; then echo "test.sh: --quick: broker tier skipped" >&2; exit 0; fi

bash scripts/broker.sh install
made=""
[ -n "${SIMDEDUP_RUN:-}" ] || { made=$(mktemp -d); export SIMDEDUP_RUN=$made; }
trap '[ -z "$made" ] || rm -rf "$made"' EXIT
# SQLite storage: tansu 0.6's in-memory storage drops records when a consumer resumes from an
# offset inside a stored batch, which every restart and rebalance does.
line=$(bash scripts/broker.sh start --sqlite "$SIMDEDUP_RUN/broker.db")
eval "$line"
trap 'bash scripts/broker.sh stop; [ -z "$made" ] || rm -rf "$made"' EXIT
export SIMDEDUP_TEST_BROKERS=$SIMDEDUP_BROKERS
cargo test --release --locked --features broker-tests --test it kafka_broker "$@"
