"""The transport record (smoke/nccl_paths.py) and the rules on it (GF620, GF621).

NCCL lines come from the real 2xH200 capture (tests/fixtures/h200x2-2026-11-30/bench.txt, NCCL
2.28.9, NCCL_DEBUG=INFO: P2P/CUMEM, no IB device, network Socket) and, for InfiniBand, from
NCCL's format string (NVIDIA/nccl src/transport/net.cc sendSetup: "Channel %02d/%d : %d[%d] ->
%d[%d] [send] via NET/%s/%d%s%s%s"): no IB capture exists here, so those lines are inferences.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from gpufleet.model import (
    Facts,
    HostResult,
    HostSpec,
    IbLink,
    NcclConfig,
    NcclSetting,
    Report,
    SmokeResult,
    Topology,
)
from gpufleet.rules import evaluate
from gpufleet.smoke import runner
from gpufleet.smoke.nccl_paths import KEEP, parse_nccl_init

BENCH = Path(__file__).parents[1] / "fixtures" / "h200x2-2026-11-30" / "bench.txt"
IB_LINES = [  # rank 0/1 on host a, 2/3 on host b (the net.cc format; an inference)
    "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:10.0.0.1<0>",
    "Using network IB",
    "Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/1/GDRDMA",
    "Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    "Channel 01/0 : 1[1] -> 2[0] [send] via NET/IB/1(0)/GDRDMA",
    "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
]


def kept(text: str) -> list[str]:
    """What the host's cleanup keeps of a log: the real _CLEANUP script on a real run dir."""
    import tempfile  # noqa: PLC0415

    d = Path(tempfile.mkdtemp(prefix="gpufleet-smoke.test."))
    (d / "log").write_text(text)
    out = subprocess.run(["sh", "-c", runner._CLEANUP, "sh", str(d), "GPUFLEET_NONE=x", "",
                          "label=x", KEEP], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert not d.exists()
    body = out.split("==gpufleet== nccl_init rc=0\n", 1)[1]
    log = out.split("==gpufleet== log rc=0\n", 1)[1].split("==gpufleet== nccl_init", 1)[0]
    assert " NCCL INFO " not in log  # the tail for error messages keeps the ranks' own lines
    return body.split("\n==gpufleet==", 1)[0].splitlines()


def test_the_captured_h200_run_is_p2p_cumem_with_no_ib_device() -> None:
    rec = parse_nccl_init(kept(BENCH.read_text()))
    assert rec is not None and rec.source == "nccl init log"
    assert [(c.src, c.dst, c.transport, c.channels) for c in rec.connections] == [
        (0, 1, "P2P/CUMEM", 24), (1, 0, "P2P/CUMEM", 24)]
    assert rec.network == "Socket" and rec.ib_absent and rec.nvls_channels == 0
    assert all(c.gdr is None for c in rec.connections)


def test_ib_lines_name_the_hca_the_device_gdr_and_pxn() -> None:
    rec = parse_nccl_init(IB_LINES)
    assert rec is not None and rec.network == "IB"
    assert rec.hcas == ("mlx5_0:1/IB", "mlx5_1:1/IB")
    by = {(c.src, c.dst): c for c in rec.connections}
    assert by[(1, 2)].transport == "NET/IB" and by[(1, 2)].gdr is True and by[(1, 2)].proxy
    assert by[(1, 2)].channels == 2 and by[(3, 0)].net_dev == 0
    assert by[(0, 1)].transport == "P2P/CUMEM"
    no_gdr = parse_nccl_init(["Channel 00/0 : 1[1] -> 2[0] [send] via NET/IB/1"])
    assert no_gdr is not None and no_gdr.connections[0].gdr is False
    assert parse_nccl_init(["some other line", "Channel x"]) is None


def ib_facts(**kw: object) -> Facts:
    return Facts(ib_links=(IbLink("mlx5_0", "1", state="ACTIVE", phys_state="LinkUp",
                                  link_layer="InfiniBand"),), **kw)  # type: ignore[arg-type]


def world(rec_lines: list[str], facts: dict[str, Facts]) -> Report:
    rec = parse_nccl_init(rec_lines)
    smoke = SmokeResult(status="pass", backend="nccl", world_size=4, hosts=("a", "b"),
                        transport=rec)
    return Report(hosts={h: HostResult(h, "ok", facts=f, smoke=smoke) for h, f in facts.items()},
                  specs={h: HostSpec(h, h) for h in facts})


def test_a_multinode_world_over_sockets_on_ib_hosts_is_an_error_with_its_cause() -> None:
    sockets = ["NET/IB : No device found.", "Using network Socket",
               "Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0"]
    conf = NcclConfig(effective=(NcclSetting("NCCL_IB_DISABLE", "1", "/etc/nccl.conf"),))
    found = [f for f in evaluate(world(sockets, {"a": ib_facts(nccl_config=conf),
                                                 "b": ib_facts()}))
             if f.rule == "GF620"]
    (f,) = found
    assert f.severity == "error" and f.hosts == ("a", "b")
    assert f.evidence["connections"] == ["1->2"]
    assert f.evidence["causes"][0] == "NCCL_IB_DISABLE=1 in /etc/nccl.conf on a"
    assert any("No device found" in c for c in f.evidence["causes"])
    assert "rank 1 -> 2" in f.message


def test_a_world_on_ib_with_gdr_and_one_without_rdma_ports_are_fine() -> None:
    assert not [f for f in evaluate(world(IB_LINES, {"a": ib_facts(), "b": ib_facts()}))
                if f.rule.startswith("GF62")]
    sockets = ["Using network Socket", "Channel 00/0 : 1[1] -> 2[0] [send] via NET/Socket/0"]
    assert not [f for f in evaluate(world(sockets, {"a": Facts(), "b": Facts()}))
                if f.rule.startswith("GF62")]  # no RDMA port: sockets are all there is


def one_host(lines: list[str]) -> Report:
    nv = Topology(links={"GPU0": {"GPU0": "X", "GPU1": "NV18"}, "GPU1": {"GPU0": "NV18",
                                                                         "GPU1": "X"}})
    smoke = SmokeResult(status="pass", backend="nccl", world_size=2,
                        transport=parse_nccl_init(lines))
    return Report(hosts={"gpu01": HostResult("gpu01", "ok", facts=Facts(topology=nv),
                                             smoke=smoke)})


def test_nvlink_gpus_through_shared_memory_is_a_warning() -> None:
    shm = ["Channel 00/0 : 0[0] -> 1[1] via SHM/direct/direct"]
    (f,) = [f for f in evaluate(one_host(shm)) if f.rule == "GF621"]
    assert f.severity == "warning" and f.evidence["links"] == ["NV18"]
    assert not [f for f in evaluate(one_host(kept(BENCH.read_text()))) if f.rule == "GF621"]


def _ran(backend: str, init: str) -> SmokeResult:
    import json  # noqa: PLC0415

    from gpufleet.model import CommandResult  # noqa: PLC0415
    from gpufleet.smoke import verdict  # noqa: PLC0415
    from gpufleet.smoke.hostrun import HostRun  # noqa: PLC0415
    from gpufleet.transport.local import LocalTransport  # noqa: PLC0415

    spec = HostSpec(name="gpu01", address="localhost", connection="local")
    h = HostRun(spec, LocalTransport(spec), Facts(), "gfsmoke-x", run_dir="/tmp/x", nproc=2)
    h.files = {"result.json": json.dumps({"status": "pass", "backend": backend,
                                          "world_size": 2, "ranks": [], "checks": []}),
               "nccl_init": init}
    h.launch = CommandResult(rc=0, stdout="", stderr="", duration_s=1.0)
    return verdict.result(h, [h], "quick", 1.0)


def test_every_smoke_result_carries_its_transport_record() -> None:
    gloo = _ran("gloo", "")
    assert gloo.transport is not None and gloo.transport.network == "gloo/tcp"
    nccl = _ran("nccl", "\n".join(kept(BENCH.read_text())))
    assert nccl.transport is not None and nccl.transport.connections[0].transport == "P2P/CUMEM"
    assert _ran("nccl", "").transport is None  # NCCL's logging off: said as not recorded
