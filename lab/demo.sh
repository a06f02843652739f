#!/usr/bin/env bash
# `npm run demo`: install what is missing, build, run the lab demo (needs root).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" != 0 ]; then
  echo "npm run demo needs root (network namespaces and a TUN device); try: sudo npm run demo" >&2
  exit 1
fi
scripts/ensure-deps.sh
exec node dist/lab/demo.js "$@"
