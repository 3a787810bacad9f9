#!/usr/bin/env bash
# Runs every test: unit, property and integration tests (release build: jieba is slow unoptimized).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo >/dev/null || { echo "cargo not found: install Rust from https://rustup.rs" >&2; exit 1; }
cargo test --release --locked "$@"
