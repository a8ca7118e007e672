#!/usr/bin/env bash
# Installs Debian's prometheus (server + promtool) when missing. Tests start it themselves,
# on 127.0.0.1 with a temporary data dir; the package's own service is never started.
set -euo pipefail
if command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1; then
  exit 0
fi
if [ "$(id -u)" != 0 ]; then
  echo "prometheus/promtool missing; install them with: sudo apt-get install --no-install-recommends prometheus" >&2
  exit 1
fi
echo "installing Debian's prometheus (server and promtool)..." >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends prometheus >/dev/null
command -v promtool >/dev/null
