#!/usr/bin/env bash
# Extracts the embedded store of commit db26e38 into old/ (as listwatch-memstore-old) and runs
# the before/after comparison. Usage: tools/hotpath-bench/run.sh [ROUNDS]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(git -C "$here" rev-parse --show-toplevel)"
old=db26e38
rm -rf "$here/old"
mkdir -p "$here/old/src"
for f in $(git -C "$repo" ls-tree --name-only "$old" crates/memstore/src/); do
  git -C "$repo" show "$old:$f" > "$here/old/src/$(basename "$f")"
done
cat > "$here/old/Cargo.toml" <<TOML
[package]
name = "listwatch-memstore-old"
version = "0.0.0"
edition = "2024"
publish = false

[lib]
name = "listwatch_memstore_old"

[dependencies]
listwatch-api = { path = "../../../crates/api" }
listwatch-storage = { path = "../../../crates/storage" }
async-trait = "0.1"
futures = "0.3"
tokio = { version = "1", features = ["sync", "time", "rt", "macros"] }
tracing = "0.1"
TOML
cargo run --release --manifest-path "$here/Cargo.toml" -- "${1:-3}"
