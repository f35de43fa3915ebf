"""The smoke runner: pure pieces against real captures, and real runs over the local transport."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
import venv
from pathlib import Path

import pytest

from gpufleet.model import (
    CommandResult,
    Expectations,
    Facts,
    Gpu,
    GpuProcess,
    HostSpec,
    PciFunction,
    Topology,
)
from gpufleet.probes.topology import parse_nvlink_status, parse_topo_m
from gpufleet.smoke import command, levels, runner, verdict
from gpufleet.smoke.command import build_command
from gpufleet.smoke.hostrun import HostRun
from gpufleet.smoke.runner import MARKER, SmokeOptions, run_multinode, run_smoke
from gpufleet.transport.local import LocalTransport

MIB = 1 << 20


def _host(name: str = "gpu01", address: str = "10.0.0.1", facts: Facts | None = None,
          **expect: object) -> HostRun:
    spec = HostSpec(name=name, address=address, expect=Expectations(**expect))  # type: ignore[arg-type]
    h = HostRun(spec, LocalTransport(spec), facts or Facts(), "gfsmoke-test")
    h.run_dir = "/tmp/gpufleet-smoke.abc"
    h.script = "/tmp/gpufleet-smoke.abc/smoke.pyz"
    return h


# Run ids of this test process: other users of the machine may run smoke tests at the same time,
# so only processes carrying one of our runs' markers count as ours.
RUN_PREFIX = f"gfsmoke-t{os.getpid()}-"


@pytest.fixture(autouse=True)
def _own_run_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    import secrets  # noqa: PLC0415

    monkeypatch.setattr(runner, "_new_run_id", lambda: RUN_PREFIX + secrets.token_hex(4))


def _live_smoke_pids() -> list[int]:
    """Processes of this test process's smoke runs (the runner marks every one)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            env = (d / "environ").read_bytes()
        except OSError:
            continue
        if any(e.startswith(f"{MARKER}={RUN_PREFIX}".encode()) for e in env.split(b"\0")):
            pids.append(int(d.name))
    return pids


# ----------------------------------------------------------------------------- pure pieces


def test_topology_of_the_real_h200_capture_is_nv18(fixtures_dir: Path) -> None:
    text = (fixtures_dir / "h200x2-2026-11-30" / "topo-m.txt").read_text()
    topology = parse_topo_m(text)
    assert topology.links["GPU0"]["GPU1"] == "NV18"
    assert runner._uniform_link(topology) == "NV18"


def test_mixed_links_give_no_reference_key() -> None:
    links = {"GPU0": {"GPU0": "X", "GPU1": "NV18", "GPU2": "SYS"},
             "GPU1": {"GPU0": "NV18", "GPU1": "X", "GPU2": "SYS"}}
    assert runner._uniform_link(Topology(links=links)) is None


def test_reference_is_the_measured_table_on_the_measured_configuration(
        fixtures_dir: Path) -> None:
    """Facts of the real 2xH200 host: the expectation is the measured nccl-tests table itself;
    one rank measures nothing; without the links there is none."""
    h = _host(facts=h200_facts(fixtures_dir))
    h.gpu_names, h.gpu_count = ("NVIDIA H200", "NVIDIA H200"), 2
    ref = runner._reference(h, 2)
    assert ref is not None and ref[4096 * MIB] == 343.7 and ref[256 * MIB] == 298.3
    assert h.expectation is not None and h.expectation.basis == "nvlink"
    assert runner._reference(h, 1) is None  # one rank: no bandwidth to expect
    h.facts = Facts(gpus=tuple(Gpu(index=g.index, name=g.name) for g in h.facts.gpus))
    assert runner._reference(h, 2) is None  # neither NVLink nor PCIe facts: nothing to go on


def h200_facts(fixtures_dir: Path) -> Facts:
    """The facts of the captured 2xH200 host that the expectation reads (topology, NVLink, PCIe)."""
    cap = fixtures_dir / "h200x2-2026-11-30"
    gpus = tuple(Gpu(index=i, name="NVIDIA H200", pcie_gen_current=5, pcie_width_current=16)
                 for i in range(2))
    return Facts(gpus=gpus, topology=parse_topo_m((cap / "topo-m.txt").read_text()),
                 nvlink=parse_nvlink_status((cap / "nvlink-s.txt").read_text()))


def test_hung_rank_is_the_one_behind_the_waiters() -> None:
    # What the gloo hang run wrote: rank 0 timed out inside collective 3, rank 1 never entered it.
    progress = {0: {"state": "error", "seq": 3, "phase": "allreduce_exact", "host": "a"},
                1: {"state": "out", "seq": 2, "phase": "allreduce_exact", "host": "a"}}
    hung, why = verdict.hung_ranks(progress, {}, 2)
    assert hung == [1]
    assert "rank(s) 1 hung (before collective #3 in phase allreduce_exact on a)" in why
    assert "rank(s) 0 waited" in why


def test_all_ranks_inside_one_collective_is_a_collective_hang() -> None:
    progress = {r: {"state": "in", "seq": 7, "phase": "busbw", "host": "a"} for r in range(2)}
    hung, why = verdict.hung_ranks(progress, {}, 2)
    assert hung == [0, 1]
    assert "stuck together (inside collective #7 in phase busbw" in why


def test_a_rank_that_never_started_is_the_hung_one() -> None:
    progress = {0: {"state": "in", "seq": 1, "phase": "init", "host": "a"}}
    hung, why = verdict.hung_ranks(progress, {}, 2)
    assert hung == [1]
    assert "never reported progress" in why


def test_version_mismatch_message_names_hosts_and_versions() -> None:
    a, b = _host("gpu01"), _host("gpu02")
    a.versions = {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.9"}
    b.versions = {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.27.3"}
    msg = runner._version_mismatch([a, b])
    assert msg is not None
    assert "NCCL versions differ across the group: gpu01 2.28.9, gpu02 2.27.3" in msg
    b.versions = dict(a.versions)
    assert runner._version_mismatch([a, b]) is None


def test_host_command_spawns_ranks_in_its_own_session_with_the_marker() -> None:
    h = _host(smoke_python="/opt/venv/bin/python", gpu_count=2)
    h.gpu_count = 2
    argv = build_command(h, level="quick", opts=SmokeOptions(), nproc=2, ref=None,
                           timeout=100, rendezvous=None)
    assert argv[:3] == ["setsid", "-w", "sh"]
    i = argv.index("timeout")
    assert argv[i:i + 4] == ["timeout", "-k", "45", "110"]
    assert argv[i - 1] == "110"  # the wrapper records the deadline it set (verdict.py)
    # the controller's own timeout is only the backstop: past the host-side limit and its KILL
    assert command.controller_timeout(100) > 110 + 45
    assert f"{MARKER}=gfsmoke-test" in argv
    j = argv.index("/opt/venv/bin/python")
    assert argv[j + 2:j + 4] == ["--spawn", "2"]
    assert "torch.distributed.run" not in argv
    assert argv[argv.index("--expect-gpus") + 1] == "2"
    assert argv[argv.index("--smi-count") + 1] == "2"


def test_host_command_can_still_use_torchrun() -> None:
    h = _host(smoke_python="/opt/venv/bin/python", gpu_count=2)
    argv = build_command(h, level="quick", opts=SmokeOptions(launcher="torchrun"), nproc=2,
                           ref=None, timeout=100, rendezvous=None)
    j = argv.index("/opt/venv/bin/python")
    # torchrun runs under the package's watchdog (smoke.pyz watch ... -- torchrun ...), which
    # gets the level's row as data
    spec = json.dumps(levels.get("quick").host_spec(), sort_keys=True, separators=(",", ":"))
    k = argv.index("--")
    assert argv[j + 1:k] == ["/tmp/gpufleet-smoke.abc/smoke.pyz", "watch", "--run-dir",
                             "/tmp/gpufleet-smoke.abc", f"--level-spec={spec}", "--nproc", "2"]
    assert json.loads(spec)["watchdog"] == {"stopped": 3.0, "stall": 15.0, "beat": 25.0}
    assert argv[k + 1:k + 4] == ["/opt/venv/bin/python", "-m", "torch.distributed.run"]
    assert "--standalone" in argv and "--nproc_per_node=2" in argv and "--spawn" not in argv


def test_docker_command_pins_the_image_digest() -> None:
    h = _host(pytorch_image="registry.example/nvidia/pytorch:25.10-py3",
              pytorch_image_digest="sha256:" + "a" * 64)
    h.runtime, h.gpu_count = "docker", 8
    argv = build_command(h, level="full", opts=SmokeOptions(), nproc=8, ref=None,
                           timeout=600, rendezvous=None)
    d = argv.index("docker")
    docker = argv[d:]
    for flag in (["--gpus", "all"], ["--ulimit", "memlock=-1"],
                 ["-v", "/tmp/gpufleet-smoke.abc:/tmp/gpufleet-smoke.abc"]):
        k = docker.index(flag[0])
        assert docker[k:k + 2] == flag
    assert "--ipc=host" in docker and "--network=host" in docker and "--rm" in docker
    image = "registry.example/nvidia/pytorch:25.10-py3@sha256:" + "a" * 64
    k = docker.index("--")
    assert docker[docker.index(image) + 1:docker.index(image) + 3] == [
        "python3", "/tmp/gpufleet-smoke.abc/smoke.pyz"]
    assert docker[docker.index(image) + 3] == "watch"
    assert docker[k + 1] == "torchrun"
    assert docker[docker.index("--name") + 1] == "gfsmoke-test-gpu01"


def test_docker_command_passes_gpus_only_where_the_host_has_them() -> None:
    def docker_argv(gpus: int, runtimes: tuple[str, ...]) -> list[str]:
        h = _host(pytorch_image="registry.example/x:1", pytorch_image_digest="sha256:" + "a" * 64)
        h.runtime, h.gpu_count, h.runtimes = "docker", gpus, runtimes
        argv = build_command(h, level="quick", opts=SmokeOptions(), nproc=max(gpus, 2),
                               ref=None, timeout=60, rendezvous=None)
        return argv[argv.index("docker"):]

    cpu = docker_argv(0, ("runc",))
    assert "--gpus" not in cpu and not any(a.startswith("--runtime") for a in cpu)
    assert "--ulimit" not in cpu  # gloo needs no locked memory
    assert cpu[cpu.index("--label") + 1] == "gpufleet.smoke=gfsmoke-test"
    gpu = docker_argv(8, ("nvidia", "runc"))
    assert gpu[gpu.index("--gpus"):gpu.index("--gpus") + 3] == ["--gpus", "all", "--runtime=nvidia"]
    assert "--runtime=nvidia" not in docker_argv(8, ("runc",))  # --gpus alone (toolkit hook)


def test_multinode_command_spawns_node_ranks_with_the_store_on_the_first_host() -> None:
    """A world over host python needs no torchrun: each host's launcher starts its ranks as
    node rank i of the controller's order, global rank 0 (the first host) hosts the store."""
    first, other = _host("n1", "127.0.0.2"), _host("n2", "127.0.0.3")
    rdzv = {"endpoint": "127.0.0.2:29999", "id": "gfsmoke-test", "nnodes": 2}
    a = build_command(first, level="quick", opts=SmokeOptions(), nproc=2, ref=None,
                      timeout=120, rendezvous={**rdzv, "is_host": True, "node_rank": 0})
    b = build_command(other, level="quick", opts=SmokeOptions(), nproc=2, ref=None,
                      timeout=120, rendezvous={**rdzv, "is_host": False, "node_rank": 1})
    for argv, rank in ((a, "0"), (b, "1")):
        j = argv.index("--spawn")
        assert argv[j:j + 10] == ["--spawn", "2", "--nnodes", "2", "--node-rank", rank,
                                  "--master-addr", "127.0.0.2", "--master-port", "29999"]
        assert "torch.distributed.run" not in argv and "watch" not in argv
        assert "GLOO_SOCKET_IFNAME=lo" in argv


def test_multinode_command_uses_c10d_on_the_first_host_with_torchrun() -> None:
    first, other = _host("n1", "127.0.0.2"), _host("n2", "127.0.0.3")
    rdzv = {"endpoint": "127.0.0.2:29999", "id": "gfsmoke-test", "nnodes": 2}
    opts = SmokeOptions(launcher="torchrun")
    a = build_command(first, level="quick", opts=opts, nproc=2, ref=None,
                      timeout=120, rendezvous={**rdzv, "is_host": True, "node_rank": 0})
    b = build_command(other, level="quick", opts=opts, nproc=2, ref=None,
                      timeout=120, rendezvous={**rdzv, "is_host": False, "node_rank": 1})
    for argv, is_host, addr in ((a, 1, "127.0.0.2"), (b, 0, "127.0.0.3")):
        assert "--rdzv_backend=c10d" in argv and "--nnodes=2" in argv
        assert "--rdzv_endpoint=127.0.0.2:29999" in argv and "--rdzv_id=gfsmoke-test" in argv
        assert f"--rdzv_conf=is_host={is_host},join_timeout=40" in argv
        assert f"--local_addr={addr}" in argv
        assert "GLOO_SOCKET_IFNAME=lo" in argv and "--standalone" not in argv


def test_local_addr_only_where_torchrun_has_it() -> None:
    h = _host("n1", "127.0.0.2")
    rdzv = {"endpoint": "127.0.0.2:29999", "id": "x", "nnodes": 2, "is_host": True,
            "node_rank": 0}
    h.versions = {"torch": "2.1.2+cu121"}
    old = build_command(h, level="quick", opts=SmokeOptions(launcher="torchrun"), nproc=1, ref=None,
                          timeout=60, rendezvous=rdzv)
    assert not any(a.startswith("--local_addr") for a in old)
    assert command.torch_at_least("2.11.0+cu130", (2, 2))
    assert not command.torch_at_least("2.1.2", (2, 2))


def test_options_from_env() -> None:
    o = SmokeOptions.from_env({"GPUFLEET_SMOKE_TEST_HANG": "1:ddp", "GPUFLEET_SMOKE_SIZES": "1,2",
                               "GPUFLEET_SMOKE_PG_TIMEOUT": "5", "GPUFLEET_SMOKE_NPROC": "3"})
    assert (o.test_hang_rank, o.test_hang_phase, o.sizes, o.pg_timeout, o.nproc) == (
        1, "ddp", (1, 2), 5.0, 3)
    assert SmokeOptions.from_env({}) == SmokeOptions()


def test_multinode_result_carries_world_checks_and_this_hosts_bandwidth() -> None:
    a, b = _host("n1"), _host("n2")
    result = {
        "status": "pass", "level": "quick", "backend": "gloo", "world_size": 4,
        "ranks": [{"rank": r, "host": "n1" if r < 2 else "n2", "local_rank": r % 2,
                   "torch": "2.13.0+cpu", "device": "cpu", "torch_device_count": 0}
                  for r in range(4)],
        "checks": [{"name": "busbw", "passed": True, "detail": "", "data": {
            "per_host_busbw_gbps": {"n1": {"65536": 1.5}, "n2": {"65536": 2.5}}}}],
        "busbw_gbps": {"65536": 0.7},
        "matmul_tflops": {"0": 0.1, "1": 0.2, "2": 0.3, "3": 0.4},
        "timings_s": {"ddp_s": 0.5},
    }
    a.files = {"result.json": json.dumps(result), "log": "tail"}
    a.launch = b.launch = CommandResult(rc=0, stdout="", stderr="", duration_s=3.0)
    res = verdict.result(b, [a, b], "quick", 4.0)
    assert res.status == "pass" and res.world_size == 4 and res.hosts == ("n1", "n2")
    assert res.busbw_gbps == {65536: 2.5}
    assert res.matmul_tflops == {0: 0.3, 1: 0.4}
    assert res.timings_s["ddp_s"] == 0.5 and res.timings_s["runner_total_s"] == 4.0


# ----------------------------------------------------------------------------- real runs


def test_busy_host_is_skipped_unless_forced(tmp_path: Path) -> None:
    spec = HostSpec(name="local", address="localhost", connection="local")
    facts = Facts(gpus=(Gpu(index=0, name="NVIDIA H200"),),
                  gpu_processes=(GpuProcess(pid=4242, name="python3"),))
    res = run_smoke(spec, LocalTransport(spec), facts)
    assert res.status == "busy"
    assert res.error is not None and "pid 4242 python3" in res.error and "--force" in res.error
    assert list(Path("/tmp").glob(f"gpufleet-smoke.{RUN_PREFIX}*")) == []  # the run dir went too


def test_hung_nvidia_smi_starts_no_ranks() -> None:
    # issue 25: the fallback world size (CPU_RANKS) failed a phantom rank 1 on a 1-GPU host
    # whose nvidia-smi hung; now nothing starts and the error says why.
    spec = HostSpec(name="local", address="localhost", connection="local")
    facts = Facts(errors={"nvidia_smi": "nvidia-smi hung (no answer in 1 s)"},
                  pci_gpus=(PciFunction("0000:00:06.0", "0x030200", "0x2335"),))
    res = run_smoke(spec, LocalTransport(spec), facts, timeout=60)
    assert (res.status, res.world_size, res.ranks) == ("error", 0, ())
    assert res.error == ("local: the GPUs could not be counted (nvidia-smi hung (no answer in "
                         "1 s)); the smoke test starts no ranks it cannot place")
    assert list(Path("/tmp").glob(f"gpufleet-smoke.{RUN_PREFIX}*")) == []


def test_a_python_without_torch_says_so_and_names_the_variable(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # issue 25: over SSH `python3` was the system one; the headline was "rank 0 exited 1".
    venv.create(tmp_path / "bare", with_pip=False)  # a real interpreter with no torch
    py = str(tmp_path / "bare/bin/python")
    (tmp_path / "home/.venv/bin").mkdir(parents=True)  # one that has torch: this test's own
    wrapper = tmp_path / "home/.venv/bin/python"
    wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} \"$@\"\n")
    wrapper.chmod(0o755)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    spec = HostSpec(name="local", address="localhost", connection="local",
                    expect=Expectations(smoke_python=py))
    res = run_smoke(spec, LocalTransport(spec), Facts(), timeout=120)
    assert res.status == "error" and res.error is not None
    assert res.error.startswith(f"No module named 'torch' for {py} on local: set "
                                "gpufleet_smoke_python to an interpreter that has torch"), res.error
    assert (f"; interpreters with torch on local: {tmp_path}/home/.venv/bin/python; "
            in res.error), res.error


def test_a_gpu_mask_in_the_environment_is_named_when_torch_sees_fewer_gpus() -> None:
    # issue 25: torch (CPU here: 0 GPUs) sees fewer than nvidia-smi (1) and the mask is named
    spec = HostSpec(name="local", address="localhost", connection="local",
                    expect=Expectations(smoke_python=sys.executable))
    facts = Facts(gpus=(Gpu(index=0, name="NVIDIA H200"),))
    res = run_smoke(spec, LocalTransport(spec), facts, timeout=120,
                    options=SmokeOptions(env={"CUDA_VISIBLE_DEVICES": "1"}))
    [dc] = [c for c in res.checks if c.name == "device_count"]
    assert not dc.passed
    assert ("local: torch sees 0 GPU(s), nvidia-smi lists 1 (CUDA_VISIBLE_DEVICES=1 in the "
            "ranks' environment: from the ssh session, the image's env or the run's env; unset "
            "it there)") in dc.detail


def _fake_python(path: Path, nccl: str) -> str:
    path.write_text(f"#!/bin/sh\necho '{{\"torch\": \"2.11.0+cu130\", \"cuda\": \"13.0\", "
                    f"\"nccl\": \"{nccl}\"}}'\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return str(path)


def test_multinode_refuses_mismatched_nccl_before_launching(tmp_path: Path) -> None:
    members = []
    for name, nccl in (("n1", "2.28.9"), ("n2", "2.27.3")):
        spec = HostSpec(name=name, address="localhost", connection="local", expect=Expectations(
            smoke_python=_fake_python(tmp_path / f"py-{name}", nccl)))
        members.append((spec, LocalTransport(spec), Facts()))
    res = run_multinode(members)
    assert set(res) == {"n1", "n2"}
    for r in res.values():
        assert r.status == "error" and r.hosts == ("n1", "n2")
        assert r.error is not None
        assert "NCCL versions differ across the group: n1 2.28.9, n2 2.27.3" in r.error


def test_multinode_refuses_a_busy_member(tmp_path: Path) -> None:
    members = []
    for name, procs in (("n1", ()), ("n2", (GpuProcess(pid=99, name="train.py"),))):
        spec = HostSpec(name=name, address="localhost", connection="local", expect=Expectations(
            smoke_python=_fake_python(tmp_path / f"py-{name}", "2.28.9")))
        facts = Facts(gpus=(Gpu(index=0, name="NVIDIA H200"),), gpu_processes=procs)
        members.append((spec, LocalTransport(spec), facts))
    res = run_multinode(members)
    assert (res["n1"].status, res["n2"].status) == ("skipped", "busy")
    assert res["n1"].error is not None and "n2: pid 99 train.py" in res["n1"].error


def test_multinode_uses_the_versions_its_caller_read_and_still_compares_them(
        tmp_path: Path) -> None:
    """Known versions (localize read them once) are not probed again: a python that cannot run
    would otherwise be "could not read"; a mismatch among them is still refused."""
    broken = tmp_path / "py-broken"
    broken.write_text("#!/bin/sh\necho probed >&2; exit 3\n")
    broken.chmod(0o755)
    members = []
    for name in ("n1", "n2"):
        spec = HostSpec(name=name, address="localhost", connection="local",
                        expect=Expectations(smoke_python=str(broken)))
        facts = Facts(gpus=(Gpu(index=0, name="NVIDIA H200"),))
        members.append((spec, LocalTransport(spec), facts))
    known = {"n1": {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.28.9"},
             "n2": {"torch": "2.11.0+cu130", "cuda": "13.0", "nccl": "2.27.3"}}
    res = run_multinode(members, versions=known)
    assert res["n1"].status == "error"
    assert "NCCL versions differ across the group: n1 2.28.9, n2 2.27.3" in (res["n1"].error
                                                                           or "")
    # a host the caller knows nothing about is still probed (here: its python fails)
    res = run_multinode(members, versions={"n1": known["n1"]})
    assert "n2: could not read torch/NCCL versions: probed" in (res["n1"].error or "")
    assert "n1:" not in (res["n1"].error or "")


def test_the_controllers_timeout_is_named_with_the_host_when_only_it_fired() -> None:
    """A host that stopped answering: no exit record, the controller's backstop ended the launch."""
    h = _host("gpu01")
    h.nproc = 2
    h.files = {"rank0.progress": json.dumps({"rank": 0, "state": "in", "seq": 3, "phase": "ddp"}),
               "rank1.progress": json.dumps({"rank": 1, "state": "before", "seq": 2,
                                             "phase": "ddp"})}
    h.launch = CommandResult(rc=None, stdout="", stderr="", duration_s=185.04, timed_out=True)
    res = verdict.result(h, [h], "quick", 190.0)
    assert res.status == "timeout" and res.hung_ranks == (1,)
    assert "the controller's timeout fired on gpu01 after 185.0 s" in (res.error or "")
    assert "host-side" not in (res.error or "")
    assert res.causes["controller_timeout"] == {"hosts": {"gpu01": 185.0}, "fired": True}
    # both fired (the exit record came back late): the host-side deadline first, both named
    h.files["exit"] = "rc=124 start=100 end=210 limit=110"
    res = verdict.result(h, [h], "quick", 190.0)
    assert ("the host-side deadline fired on gpu01 (110 s of 110 s); the controller's timeout "
            "also fired on gpu01 after 185.0 s") in (res.error or "")


@pytest.mark.slow
def test_runner_timeout_kills_a_hung_run_and_names_the_rank() -> None:
    """A rank stops before a collective and the process-group timeout is far away: the host-side
    deadline must end the run (the controller's timeout lies beyond it, a backstop only), be
    recorded and named, name the rank, and leave no process behind."""
    import sys  # noqa: PLC0415

    spec = HostSpec(name="local", address="localhost", connection="local",
                    expect=Expectations(smoke_python=sys.executable))
    # The launcher's stall watchdog is pushed past the deadline: this is the deadline's test.
    opts = SmokeOptions(test_hang_rank=1, pg_timeout=600,
                        env={"GPUFLEET_SMOKE_WATCHDOG_STALL": "600"})
    t = time.monotonic()
    res = run_smoke(spec, LocalTransport(spec), Facts(), timeout=30, options=opts)
    took = time.monotonic() - t
    assert res.status == "timeout", res.error
    assert res.hung_ranks == (1,)
    assert res.error is not None and "exceeded its timeout" in res.error
    assert "host-side deadline fired on local" in res.error
    assert res.causes["deadline"]["local"]["fired"] is True
    assert "rank(s) 1 hung" in res.error
    assert "controller's timeout" not in res.error and "controller_timeout" not in res.causes
    # The host-side limit plus timeout's KILL grace plus the cleanup's bounded kill loop: a
    # loaded machine stretches the launch, never past the controller's backstop.
    assert took < command.host_limit(30) + command.KILL_GRACE_S + 30, took
    assert _live_smoke_pids() == [], "processes of the smoke run survived the kill"
    assert not os.path.exists("/tmp/gpufleet-smoke.abc")


@pytest.mark.slow
def test_ctrl_c_during_a_run_leaves_nothing_behind() -> None:
    """KeyboardInterrupt while torchrun runs: the runner kills the run's session and every
    process with its marker (torchrun's workers live in sessions of their own), then re-raises."""
    import signal  # noqa: PLC0415
    import sys  # noqa: PLC0415
    import threading  # noqa: PLC0415

    spec = HostSpec(name="local", address="localhost", connection="local",
                    expect=Expectations(smoke_python=sys.executable))
    opts = SmokeOptions(test_hang_rank=1, pg_timeout=600)

    returned = threading.Event()  # never interrupt a later test

    def interrupt_once_started() -> None:
        # The launch wrapper writes its pgid file as it starts the ranks (cheap to look for: a
        # /proc scan takes seconds on a loaded CI machine, and the watchdog ends this hung world
        # 15 s after rank 1 stops).
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(
                Path("/tmp").glob(f"gpufleet-smoke.{RUN_PREFIX}*/pgid")):
            time.sleep(0.1)
        time.sleep(1)  # the ranks are starting (importing torch) or running by now
        if not returned.is_set():
            os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    started = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            res = run_smoke(spec, LocalTransport(spec), Facts(), timeout=120, options=opts)
            pytest.fail(f"the run ended after {time.monotonic() - started:.1f} s, before the "
                        f"interrupt: {res.status} {res.error!r} {res.log_tail!r}")
    finally:
        returned.set()
    assert _live_smoke_pids() == [], "processes of the smoke run survived Ctrl-C"
    assert list(Path("/tmp").glob(f"gpufleet-smoke.{RUN_PREFIX}*")) == []
