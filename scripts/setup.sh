#!/usr/bin/env bash
# Sets up gpufleet on a fresh Debian/Ubuntu machine as root: system packages, a venv in .venv
# with the agent and its test extras (torch CPU build pinned), idempotent and quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in python3 python3-venv python3-pip openssh-server openssh-client debootstrap iproute2 procps \
           util-linux sudo git ca-certificates gnupg apt-utils dpkg-dev docker.io docker-registry \
           slurmctld slurmd slurm-client munge prometheus \
           rpm createrepo-c \
           g++ python3-dev; do  # g++, python3-dev: torch.compile on CPU (inductor) in smoke tests;
  # rpm, createrepo-c: rpmbuild/rpmsign/createrepo_c/modifyrepo_c build the RHEL role tests' repos
  # prometheus: promtool, which checks and unit-tests the shipped alert rules
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || need+=("$pkg")
done
if [ ${#need[@]} -gt 0 ]; then
  # Package scripts must not start daemons here (docker.io, docker-registry): the tests start
  # their own. Debian's mechanism; only when the machine has no policy of its own.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    policy=/usr/sbin/policy-rc.d
    printf '#!/bin/sh\nexit 101\n' > "$policy" && chmod 755 "$policy"
    trap 'rm -f "$policy"' EXIT
  fi
  apt-get -o DPkg::Lock::Timeout=900 update -qq
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# python3-venv also gives ansible-test sanity (scripts/sanity.sh) ensurepip in its tool environments.
PY=${GPUFLEET_PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q -e '.[test]'
# Headless Chromium (Debian's package) and fonts for the HTML report's browser test (issue 16).
browser_need=()
for pkg in chromium fonts-liberation; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "ok installed" || browser_need+=("$pkg")
done
if [ ${#browser_need[@]} -gt 0 ]; then
  apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${browser_need[@]}" \
    >/dev/null || { apt-get -o DPkg::Lock::Timeout=900 update -qq
    apt-get -o DPkg::Lock::Timeout=900 install -y -qq --no-install-recommends "${browser_need[@]}" >/dev/null; }
fi
