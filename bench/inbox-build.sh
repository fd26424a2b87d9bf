#!/usr/bin/env bash
# What each adapter of the Rust inbox library (clients/rust, crate inlet-inbox) adds to a
# build: `cargo build -p inlet-inbox` into an empty target directory of its own, the core
# first (no features), then the default adapters (diesel, actix-web), then every feature
# (sqlx, axum); each step's wall time is what it added. Run it on a quiet machine (no
# build or test beside it); the figures go in clients/rust/README.md.
#
#   bench/inbox-build.sh            # PROFILE=dev (default) or PROFILE=release
set -euo pipefail
cd "$(dirname "$0")/.."
profile="${PROFILE:-dev}"
target=$(mktemp -d)
trap 'rm -rf "$target"' EXIT
printf '%-28s %s\n' "features" "added (s)"
for step in "--no-default-features" "" "--all-features"; do
  started=$(date +%s.%N)
  # $step is empty for the default features: unquoted on purpose.
  # shellcheck disable=SC2086
  CARGO_TARGET_DIR="$target" cargo build -q --locked --profile "$profile" -p inlet-inbox $step
  ended=$(date +%s.%N)
  printf '%-28s %.1f\n' "${step:-default}" "$(echo "$ended - $started" | bc)"
done
