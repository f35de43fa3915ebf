"""Stand-in for get-pip.py, the pip bootstrap ansible-test downloads (this machine cannot reach it).

ansible-test sanity makes each tool's virtual environment with `python -m venv --without-pip`, then
runs `~/.ansible/test/cache/get_pip_<version>.py` under that environment's python with pip's
arguments: `pip==<version> --disable-pip-version-check --no-setuptools --no-wheel`
(ansible/ansible@v2.19.4:test/lib/ansible_test/_util/target/setup/requirements.py, bootstrap();
seen in ansible-core 2.19.14 as installed). get-pip.py passes every argument to `pip install`
except its own `--no-setuptools` and `--no-wheel` (pypa/get-pip:README.md, "get-pip.py options").
Here the pip that CPython bundles (ensurepip, no network) installs the requested pip from the
package index pip is configured with, so the requested version is the one ansible-test pins.
"""

from __future__ import annotations

import subprocess
import sys

OWN_OPTIONS = {"--no-setuptools", "--no-wheel"}


def main(argv: list[str]) -> int:
    pip_args = [a for a in argv if a not in OWN_OPTIONS]
    # In a child: ensurepip.bootstrap() in this process would set PIP_CONFIG_FILE=/dev/null and drop
    # PIP_* from os.environ (CPython's ensurepip does, bpo-19734), losing the index configuration.
    rc = subprocess.call([sys.executable, "-m", "ensurepip"])
    if rc == 0:
        rc = subprocess.call([sys.executable, "-m", "pip", "install", "--upgrade", *pip_args])
    if rc == 0 and "--no-setuptools" in argv:
        # ensurepip on Python < 3.12 installs setuptools too; get-pip.py would not have.
        rc = subprocess.call([sys.executable, "-m", "pip", "uninstall", "-q", "-y", "setuptools"])
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
