#!/usr/bin/env bash
# `npm test`: installs what the tests need, builds, runs the unit tests and — as root — the
# integration tests in network namespaces. Integration tests are skipped only when not root, and
# this says so.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/ensure-deps.sh
# Leftovers of an interrupted earlier run (every test lab is named uv<letters><pid>-…).
if [ "$(id -u)" = 0 ]; then
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^uv[a-z]*[0-9]+-" || true); do
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
  done
  node --test --test-concurrency=1 dist/test/unit/ dist/test/integration/
else
  echo "NOTE: integration tests SKIPPED: they need root (network namespaces, TUN device). Unit tests only."
  node --test dist/test/unit/
fi
