#!/usr/bin/env bash
# Sets up gpufleet on a fresh Debian/Ubuntu machine as root: system packages, a venv in .venv
# with the agent and its test extras (torch CPU build pinned), idempotent and quiet.
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
need=()
for pkg in python3 python3-venv python3-pip openssh-server openssh-client debootstrap iproute2 procps \
           util-linux sudo git ca-certificates gnupg apt-utils dpkg-dev docker.io docker-registry \
           slurmctld slurmd slurm-client munge prometheus cron \
           rpm createrepo-c tinyproxy-bin kmod \
           g++ python3-dev; do  # g++, python3-dev: torch.compile on CPU (inductor) in smoke tests;
  # rpm, createrepo-c: rpmbuild/rpmsign/createrepo_c/modifyrepo_c build the RHEL role tests' repos
  # prometheus: promtool, which checks and unit-tests the shipped alert rules
  # kmod: depmod, which builds the role tests' module index for a simulated newer kernel
  # cron: crontab, which ansible.builtin.cron needs to write the deep-check schedule's cron.d file
  # tinyproxy-bin: the HTTP proxy the role tests send key downloads through (the binary only: the
  # tinyproxy package's init script would start one on every address)
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
# pip byte-compiles what it installs one file at a time (29 of the 52 s of this install, torch's
# 8000 modules mostly); compileall does the same on every core, for what this run installed (newer
# than the mark: everything in a new venv, nothing but gpufleet's own entry on a re-run). It also
# compiles the editable agent and the tests' helpers, which pip never does: where
# PYTHONDONTWRITEBYTECODE is set (as on the machines here) nothing writes their .pyc later, so
# every gpufleet process the suite starts would compile ~20k lines again (0.25 s each). A .pyc
# is checked against its source's mtime, so an edit is never run stale. Third-party files that do
# not compile (torch's Python 3.12 test data) are skipped silently, as pip skips them.
mark=.venv/.gpufleet-setup-mark
touch "$mark"
.venv/bin/python -m pip install -q --upgrade pip >/dev/null
.venv/bin/python -m pip install -q --no-compile -e '.[test]'
find .venv/lib/python3*/site-packages -mindepth 1 -maxdepth 1 -newer "$mark" -print0 \
  | xargs -0 -r .venv/bin/python -m compileall -qq -j 0 >/dev/null || true
# Not tests/fleet/profiles: a script and its data, which test_profiles keeps free of anything else.
.venv/bin/python -m compileall -q -j 0 -x tests/fleet/profiles/ agent tests >/dev/null
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
