"""Version strings as the ranks report them (torch's integer codes decoded)."""

from __future__ import annotations

import json
import sys


def fmt_cudnn(v):
    if not v:
        return None
    # cuDNN >= 9 encodes major*10000 + minor*100 + patch; 8.x used major*1000 + minor*100 + patch.
    if v >= 90000:
        return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
    return "%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100)


def fmt_nccl(v):
    if v is None:
        return None
    if isinstance(v, tuple):
        return ".".join(str(x) for x in v[:3])
    # ncclGetVersion: major*10000 + minor*100 + patch from 2.9, major*1000 + ... before.
    if v >= 20900:
        return "%d.%d.%d" % (v // 10000, v // 100 % 100, v % 100)
    return "%d.%d.%d" % (v // 1000, v // 100 % 10, v % 100)


def torch_version():
    try:
        import importlib.metadata as md  # noqa: PLC0415

        parts = md.version("torch").split("+")[0].split(".")[:2]
        return tuple(int(x) for x in parts)
    except Exception:  # unknown: assume a current torch
        return (99, 0)


def print_versions():
    import torch  # noqa: PLC0415

    try:
        nccl = fmt_nccl(torch.cuda.nccl.version())
    except (AttributeError, RuntimeError):
        nccl = None
    print(json.dumps({"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": nccl,
                      "python": sys.version.split()[0]}))
    return 0
