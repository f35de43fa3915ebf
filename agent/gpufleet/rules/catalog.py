"""Every rule id, its usual severity, title and remediation template. Ids never change meaning.

Families: GF0xx host state, GF1xx desired state (inventory variables), GF2xx peer drift,
GF3xx compatibility, GF4xx hardware health, GF5xx performance, GF6xx smoke test,
GF7xx configuration, GF8xx workspace containers, GF9xx node-local (Slurm). The rows live in
catalog_host.py (GF0xx-GF2xx), catalog_health.py (GF3xx-GF4xx) and catalog_run.py (GF5xx-GF9xx);
this module assembles them with the fact and smoke hints.
Templates are `str.format` strings; `{host}` is the Ansible limit (comma-joined host names).
docs/rules.md is generated from this table and scripts/rules_doc.md.in: after an edit run
`python scripts/rules_doc.py` (tests/unit/test_rules_docs.py fails while the page is stale).
"""

from __future__ import annotations

from collections.abc import Mapping

from gpufleet.rules.catalog_health import HEALTH_RULES
from gpufleet.rules.catalog_host import HOST_RULES
from gpufleet.rules.catalog_run import RUN_RULES
from gpufleet.rules.rule_info import _DRIFT, _RERUN, _SITE, _UPGRADE, _WS, FAMILIES, RuleInfo

__all__ = [
           "FACT_HINTS",
           "FACT_HINT_DEFAULT",
           "FAMILIES",
           "RULES",
           "SMOKE_HINTS",
           "_DRIFT",
           "_RERUN",
           "_SITE",
           "_UPGRADE",
           "_WS",
           "RuleInfo",
]

_RULES: tuple[RuleInfo, ...] = (*HOST_RULES, *HEALTH_RULES, *RUN_RULES)

RULES: Mapping[str, RuleInfo] = {r.id: r for r in _RULES}

# Per fact family (Facts.errors key), what usually brings the fact back (GF010's {hint}).
FACT_HINTS: Mapping[str, str] = {
    "nvidia_smi": "install or repair the driver: " + _SITE + " --tags nvidia_driver -l {host}",
    "kernel_module": "load the driver (`modprobe nvidia`) or install it: "
    + _SITE + " --tags nvidia_driver -l {host}",
    "gpus": "run `nvidia-smi -q` on {host} and read its error",
    "kernels": "list /boot on {host} (`ls -l /boot`) and read the error",
    "toolkit": "install the container toolkit: " + _SITE
    + " --tags nvidia_container_toolkit -l {host}",
    "docker": "install and start the engine: " + _SITE + " --tags container_runtime -l {host}",
    "containerd": "install and start the engine: " + _SITE + " --tags container_runtime -l {host}",
    "image": "pull the image: " + _SITE + " --tags pytorch_image -l {host}",
    "nccl": "nothing to do unless jobs use the system NCCL: torch brings its own",
    "probe": "rerun `gpufleet facts -l {host}` and read stderr; raise --timeout if the host is "
    "slow",
}
FACT_HINT_DEFAULT = ("install the missing tool on {host} or fix its permissions; the facts it "
                     "gives are unknown until then")

# Per smoke check, the likely cause (GF601's {hint}).
SMOKE_HINTS: Mapping[str, str] = {
    "versions": "torch could not report CUDA/NCCL versions: the image or python lacks a CUDA build",
    "device_count": "torch sees a different GPU count than nvidia-smi: check CUDA_VISIBLE_DEVICES "
    "and `docker run --gpus all`",
    "matmul": "a GPU computed a wrong matmul: drain the host and run `dcgmi diag -r 3`",
    "allreduce_exact": "all-reduce returned wrong values: check NVLink/PCIe (XIDs, "
    "`nvidia-smi nvlink -s`) and NCCL_P2P_DISABLE",
    "ddp": "DDP parameters diverged across ranks: check the all-reduce and the NCCL versions",
    "amp": "the mixed-precision step failed: check the torch/CUDA build of the image",
    "busbw": "the bandwidth sweep failed: run with NCCL_DEBUG=INFO",
    "readiness": "a readiness check crashed: read the traceback in the check's data",
    "hostdev_bw": "the host-device copy check crashed: read the traceback in the check's data",
    "scaling": "the scaling check crashed: read the traceback in the check's data",
    "sdc": "the silent-data-corruption check crashed: read the traceback in the check's data",
}
