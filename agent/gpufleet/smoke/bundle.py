"""The host-side smoke package (smoke/remote/) as one zip, built in memory, shipped as one file.

Python runs a zip whose top level holds `__main__.py` (zipapp, PEP 441; Python >= 2.6), and
torchrun runs any script path, so `python smoke.pyz ARGS` works under the host python, inside
the pinned image, under srun and over SSH with become, with no sys.path edits on the host.
Stored, not deflated: the zip import then needs no zlib, and it is ~100 KB either way.
"""

from __future__ import annotations

import functools
import io
import zipfile
from pathlib import Path

REMOTE = Path(__file__).with_name("remote")
PACKAGE = "gpufleet_smoke"  # the package's name on the host (unique on the host's sys.path)
NAME = "smoke.pyz"  # the file's name in the run dir
_MAIN = f"import sys\n\nfrom {PACKAGE}.ddp import main\n\nsys.exit(main())\n"
_EPOCH = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same bytes


@functools.cache
def build() -> bytes:
    """The zip's bytes: remote/*.py under PACKAGE/, and a __main__.py that calls ddp.main."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        files = [("__main__.py", _MAIN.encode())]
        files += [(f"{PACKAGE}/{p.name}", p.read_bytes()) for p in sorted(REMOTE.glob("*.py"))
                  if p.name != "__main__.py"]
        for name, data in files:
            info = zipfile.ZipInfo(name, _EPOCH)
            info.external_attr = 0o644 << 16
            zf.writestr(info, data)
    return buf.getvalue()
