#!/usr/bin/env bash
# Installs what uvs's demo and tests need and are missing: Debian packages (as root) and the npm
# dependencies, then builds (native TUN addon + TypeScript). Safe to run again: it only does what
# is missing. Usage: scripts/ensure-deps.sh [--no-system]
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
have() { command -v "$1" >/dev/null 2>&1; }
if [ "${1:-}" != "--no-system" ] && [ "$(id -u)" = 0 ]; then
  have ip || need+=(iproute2)
  have curl || need+=(curl)
  have iperf3 || need+=(iperf3)
  have nc || need+=(netcat-openbsd)
  have python3 || need+=(python3)
  have make || need+=(make)
  have g++ || need+=(g++)
  have sha256sum || need+=(coreutils)
  have pgrep || need+=(procps)
  have redis-server || need+=(redis-server)
  have redis-sentinel || need+=(redis-sentinel)
  if [ ${#need[@]} -gt 0 ]; then
    echo "uvs: installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
  fi
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "uvs: installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ ! -f build/Release/uvs_tun.node ] || [ lb/native/tun.c -nt build/Release/uvs_tun.node ]; then
  npx node-gyp rebuild --silent
fi
npx tsc -p tsconfig.json
