#!/usr/bin/env bash
# ansible-test sanity on the collection, as Galaxy's importer and Automation Hub run it, from what the
# package index serves: ansible-test's pip bootstrap download is replaced by scripts/sanity/get_pip.py
# (ensurepip + pip install). Extra arguments go to ansible-test (e.g. --test pylint).
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
py=$repo/.venv/bin/python
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# The pip version ansible-test pins for its tool environments (and names its bootstrap file after).
pip_version=$("$py" -c 'import sys, types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version=sys.argv[1]))["pip"])' "$pyver")
cache=$HOME/.ansible/test/cache/get_pip_${pip_version//./_}.py
mkdir -p "$(dirname "$cache")"
# A get-pip.py someone saved there by hand (ansible-test's own advice) is left alone.
if [ ! -e "$cache" ] || grep -q '^"""Stand-in for get-pip.py' "$cache"; then
  cp "$repo/scripts/sanity/get_pip.py" "$cache"
fi
cd "$repo/ansible_collections/gpufleet/gpu"
PATH=$repo/.venv/bin:$PATH exec "$repo/.venv/bin/ansible-test" sanity --python "$pyver" --local --color no "$@"
