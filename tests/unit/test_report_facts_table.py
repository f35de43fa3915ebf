"""Golden test of the facts table (gpufleet facts --format table, report/facts_table.py)."""

from __future__ import annotations

from gpufleet.model import DockerInfo, DriverInfo, Facts, Gpu, HostResult, OsInfo
from gpufleet.report import facts_table

H200 = "NVIDIA H200"

RESULTS = {
    "gpu01": HostResult(
        name="gpu01", status="ok",
        facts=Facts(
            os=OsInfo(id="ubuntu", version_id="24.04", kernel="6.8.0-88-generic"),
            driver=DriverInfo(version="580.159.04", kernel_module_version="580.95.05",
                              cuda_version="13.0"),
            gpus=(Gpu(index=0, name=H200), Gpu(index=1, name=H200)),
            toolkit_version="1.19.1",
            docker=DockerInfo(server_version="28.2.2"),
            nccl_system_version="2.28.3",
        ),
    ),
    "cpu01": HostResult(
        name="cpu01", status="ok",
        facts=Facts(os=OsInfo(id="debian", version_id="12", kernel="6.1.0-40-amd64"),
                    errors={"nvidia_smi": "nvidia-smi: not found",
                            "toolkit": "nvidia-ctk: not found"}),
    ),
    "gpu07": HostResult(name="gpu07", status="unreachable",
                        error="gpu07 (10.0.0.7:22): connection refused (is sshd running on "
                              "port 22?)"),
}

GOLDEN = """\
3 host(s), 2 GPU(s), 1 unreachable
host    status        OS             kernel             driver                          CUDA   GPUs             toolkit   docker   NCCL
─────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────────
gpu01   ok            ubuntu 24.04   6.8.0-88-generic   580.159.04 (module 580.95.05)   13.0   2x NVIDIA H200   1.19.1    28.2.2   2.28.3
cpu01   ok            debian 12      6.1.0-40-amd64     -                               -      none             -         -        -
gpu07   unreachable   -              -                  -                               -      -                -         -        -
problems
  cpu01: nvidia_smi: nvidia-smi: not found; toolkit: nvidia-ctk: not found
  gpu07: gpu07 (10.0.0.7:22): connection refused (is sshd running on port 22?)
"""  # noqa: E501


def test_facts_table_golden() -> None:
    assert facts_table(RESULTS, width=160) == GOLDEN


def test_facts_table_colour_only_when_asked() -> None:
    assert "\x1b[" not in facts_table(RESULTS)
    assert "\x1b[" in facts_table(RESULTS, color=True)
