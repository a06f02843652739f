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
  have keepalived || need+=(keepalived)
  have tcpdump || need+=(tcpdump)           # reads flow-sampling captures back (tests)
  have bird || need+=(bird2) # BGP speaker of the ECMP lab (lab/ecmp-lab.ts)
  have nginx || [ -x /usr/sbin/nginx ] || need+=(nginx) # PROXY protocol lab: a real server that reads the header
  have redis-sentinel || need+=(redis-sentinel)
  have nft || [ -x /usr/sbin/nft ] || need+=(nftables) # the labs cut links and drop packets with it (failover, SYN proxy loss)
  if [ ${#need[@]} -gt 0 ]; then
    echo "uvs: installing Debian packages: ${need[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq "${need[@]}" >/dev/null
    # The labs start their own BIRD in each namespace; the distribution's service is not needed.
    if [[ " ${need[*]} " == *" bird2 "* ]]; then systemctl disable --now bird >/dev/null 2>&1 || true; fi
  fi
  # The labs start their own keepalived, redis-server and nginx inside network namespaces; the
  # distribution's services are not wanted (the packages enable keepalived.service, nginx.service).
  if [[ " ${need[*]} " == *" keepalived "* ]] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now keepalived >/dev/null 2>&1 || true
  fi
  if [[ " ${need[*]} " == *" nginx "* ]] && command -v systemctl >/dev/null 2>&1; then
    systemctl disable --now nginx >/dev/null 2>&1 || true
  fi
fi

if [ ! -d node_modules ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "uvs: installing npm dependencies"
  npm ci --no-audit --no-fund --loglevel=error
fi
if [ ! -f build/Release/uvs_tun.node ] || [ -n "$(find lb/native binding.gyp -newer build/Release/uvs_tun.node -print -quit)" ]; then
  npx node-gyp rebuild --silent
fi
npx tsc -p tsconfig.json # product and tests (tsconfig.build.json is the product alone)
