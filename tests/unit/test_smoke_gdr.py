"""The per-HCA GPUDirect check (smoke/remote/gdr.py): real processes, a stand-in ib_write_bw.

No host here has an HCA or perftest, so `ib_write_bw` is a stand-in script over a sysfs tree in
the kernel's layout (tests/harness/sysfs_ib.py). Server and client really run, the client
against localhost, as on a host. What it does and prints, each from a source (the numbers are
the case's):
- the server prints perftest's "Waiting for client to connect..." banner and waits; the client
  is the process whose last argument is the server's name (linux-rdma/perftest#234, a capture of
  `ib_write_bw -D 10 -d mlx5_0` server and client);
- with --use_cuda the process first reports its CUDA device ("initializing CUDA", "Picking device
  No. N": the --use_cuda capture in linux-rdma/perftest#241);
- the report: the RDMA_Write BW Test header and one row under `#bytes #iterations BW
  peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]` (--report_gbits; the capture in NVIDIA's GPU
  Operator docs, NVIDIA/cloud-native-docs@8e3a5df0 gpu-operator/gpu-operator-rdma.rst);
- a client that finds no server prints "Couldn't connect to HOST:PORT" on stderr and exits 1
  (perftest's perftest_communication.c: `fprintf(stderr, "Couldn't connect to %s:%d\n", ...)`).
"""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from gpufleet.smoke.remote import gdr
from harness.sysfs_ib import write_tree

REPORT = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : {dev}
 Number of qps   : 1\t\tTransport type : IB
 Connection type : RC\t\tUsing SRQ      : OFF
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      2000000          0.00               {gbps}   \t\t   0.746
---------------------------------------------------------------------------------------
"""


def stand_in(tmp: Path, gbps: dict[str, str]) -> Path:
    """bin/ib_write_bw: the server waits, the client (last argument localhost) reports."""
    bindir = tmp / "bin"
    bindir.mkdir()
    cases = "\n".join(f"    {dev}) g={value} ;;" for dev, value in gbps.items())
    report = REPORT.replace("{dev}", '$dev').replace("{gbps}", '$g')
    banner = ("************************************\n* Waiting for client to connect... *\n"
              "************************************")
    (bindir / "ib_write_bw").write_text(
        "#!/bin/sh\ndev=; gpu=; port=; for a in \"$@\"; do [ \"$prev\" = -d ] && dev=$a; "
        "[ \"$prev\" = -p ] && port=$a; case $a in --use_cuda=*) gpu=${a#--use_cuda=} ;; esac; "
        "prev=$a; last=$a; done\n"
        f"[ \"$last\" = localhost ] || {{ printf '%s\\n' '{banner}'; exec sleep 30; }}\n"
        "case $dev in\n" + cases +
        "\n    *) echo \"Couldn't connect to localhost:$port\" >&2; exit 1 ;;\nesac\n"
        "printf 'initializing CUDA\\nPicking device No. %s\\n' \"$gpu\"\n"
        f"cat <<EOF\n{report}EOF\n")
    (bindir / "ib_write_bw").chmod(0o755)
    return bindir


@pytest.fixture
def hcas(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    env = write_tree(tmp_path, {"mlx5_0/1": {}, "mlx5_1/1": {}, "mlx5_2/1": {
        "state": "1: DOWN", "phys_state": "2: Polling"}})
    ib = Path(env["GPUFLEET_SYS_CLASS_INFINIBAND"])
    for dev, node in (("mlx5_0", "0"), ("mlx5_1", "1"), ("mlx5_2", "1")):
        (ib / dev / "device").mkdir()
        (ib / dev / "device" / "numa_node").write_text(node + "\n")
    monkeypatch.setattr(gdr, "SYS_IB", str(ib))
    monkeypatch.setattr(gdr, "DURATION_S", 1)
    return tmp_path


def world(rec: dict[str, object], name: str = "NVIDIA H200") -> list[dict[str, object]]:
    return [{"rank": 0, "checks": {"gdr": rec},
             "info": {"host": "gpu01", "local_rank": 0, "device_name": name}}]


def test_each_active_hca_is_measured_and_judged(hcas: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = stand_in(hcas, {"mlx5_0": "391.52", "mlx5_1": "201.10"})
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    rec = gdr.rank_gdr(SimpleNamespace(torch=torch))
    by = {h["hca"]: h for h in rec["hcas"]}
    assert set(by) == {"mlx5_0/1", "mlx5_1/1"}  # mlx5_2 is DOWN: GF450's, not measured
    assert by["mlx5_0/1"]["gbps"] == 391.52 and by["mlx5_0/1"]["numa"] == 0
    assert by["mlx5_1/1"]["rate_gbit"] == 400.0
    passed, detail, data = gdr.agg_gdr(world(rec))
    assert not passed and "gpu01 mlx5_1/1 (GPU 0): 201.1 Gb/s < 360 Gb/s" in detail
    assert [r["floor_gbit"] for r in data["hcas"]] == [360.0, 360.0]
    assert gdr.agg_gdr(world(rec, "NVIDIA A100-SXM4-80GB"))[0] is True  # floor 180


def test_without_perftest_it_is_not_run(hcas: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(hcas / "nothing"))
    rec = gdr.rank_gdr(SimpleNamespace(torch=torch))
    assert rec == {"passed": True, "not_run": "ib_write_bw (perftest) is not installed"}
    passed, detail, _ = gdr.agg_gdr(world(rec))
    assert passed and detail == ("GPUDirect bandwidth not run (gpu01: ib_write_bw (perftest) "
                                 "is not installed)")


def test_a_client_that_fails_names_the_hca(hcas: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bindir = stand_in(hcas, {"mlx5_0": "391.52"})  # mlx5_1's client cannot connect
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    passed, detail, _ = gdr.agg_gdr(world(gdr.rank_gdr(SimpleNamespace(torch=torch))))
    assert not passed and ("mlx5_1/1 (GPU 0): ib_write_bw exit 1: Couldn't connect to "
                           "localhost:18516") in detail
    assert gdr.parse_ib_write_bw("no table here") is None


def test_the_measured_rows_are_judged_by_gf622_and_gf624(hcas: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # What the runner records (the check's passed, detail, data) is what rules/fabric_gdr.py
    # reads: the slow HCA is GF622, the one whose client failed GF624, neither is GF601.
    from gpufleet.model import Facts, HostResult, Report, SmokeCheck, SmokeResult  # noqa: PLC0415
    from gpufleet.rules import evaluate  # noqa: PLC0415

    bindir = stand_in(hcas, {"mlx5_0": "201.10"})
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    passed, detail, data = gdr.agg_gdr(world(gdr.rank_gdr(SimpleNamespace(torch=torch))))
    smoke = SmokeResult(status="fail", level="full", backend="nccl", world_size=1,
                        checks=(SmokeCheck("gdr", passed, detail, data),))
    found = evaluate(Report(hosts={"gpu01": HostResult("gpu01", "ok", facts=Facts(),
                                                       smoke=smoke)}))
    assert sorted((f.rule, f.evidence["hca"]) for f in found if f.rule.startswith("GF6")) == [
        ("GF622", "mlx5_0/1"), ("GF624", "mlx5_1/1")]
