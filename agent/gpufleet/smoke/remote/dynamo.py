"""Answer torch._dynamo's "are we compiling?" questions without importing it (5 s saved)."""

from __future__ import annotations

import contextlib
import os
import sys
import types


class StubMissing(AttributeError):
    """The dynamo stub lacks something this torch needs: rerun with the real module."""


@contextlib.contextmanager
def dynamo_stub(torch):
    """Answer torch._dynamo's "are we compiling?" questions without importing it.

    DDP's constructor, its forward and torch.optim ask torch._dynamo whether a compiler is
    active; importing it took ~5 s of the quick run on an H200 host (measured 2026-11-30), half
    the budget. We never compile. Anything else asked of the stub raises StubMissing, and the
    caller reruns the check with the real module (same answer, only slower).
    """
    if "torch._dynamo" in sys.modules or os.environ.get("GPUFLEET_SMOKE_REAL_DYNAMO"):
        yield False
        return

    class Stub(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            raise StubMissing("%s.%s" % (self.__name__, name))

    stub, utils = Stub("torch._dynamo"), Stub("torch._dynamo.utils")
    utils.get_optimize_ddp_mode = lambda: "ddp_optimizer"
    stub.utils = utils
    stub.graph_break = lambda *a, **k: None
    stub.is_compiling = lambda: False
    stub.disable = lambda fn=None, recursive=True, **k: fn if fn is not None else (lambda f: f)
    sys.modules["torch._dynamo"], sys.modules["torch._dynamo.utils"] = stub, utils
    had = "_dynamo" in torch.__dict__
    old = torch.__dict__.get("_dynamo")
    torch._dynamo = stub
    try:
        yield True
    finally:
        for k in ("torch._dynamo", "torch._dynamo.utils"):
            if sys.modules.get(k) in (stub, utils):
                del sys.modules[k]
        if had:
            torch._dynamo = old
        elif torch.__dict__.get("_dynamo") is stub:
            del torch._dynamo
