#!/usr/bin/env bash
# Load generator: Weibo-style posts with a configurable duplicate mix, to a file, stdout or a
# Kafka topic. A thin wrapper over `simdedup generate` (builds the release binary if needed);
# every argument is passed through. Needs nothing outside this repository.
#   scripts/loadgen.sh --count 20000 --seed 7 --output posts.jsonl --truth truth.jsonl
#   scripts/loadgen.sh --count 100000 --rate 2000 --topic posts --brokers 127.0.0.1:9092
#   scripts/loadgen.sh --help
set -euo pipefail
cd "$(dirname "$0")/.."
bin=$PWD/target/release/simdedup
if [ ! -x "$bin" ] || [ -n "$(find src config Cargo.toml Cargo.lock -newer "$bin" -print -quit)" ]; then
  command -v cargo >/dev/null || { echo "loadgen.sh: cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
  cargo build --release --locked -q
fi
exec "$bin" generate "$@"
