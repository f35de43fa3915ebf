"""GF8xx on facts: each rule fires on its fault and stays quiet on a healthy workspace."""

from __future__ import annotations

import dataclasses

from gpufleet.model import (
    ContainerInfo,
    DockerInfo,
    Expectations,
    Facts,
    Gpu,
    GpuProcess,
    HostResult,
    HostSpec,
    Report,
)
from gpufleet.rules import evaluate

PINNED = "sha256:" + "1" * 64
STALE = "sha256:" + "2" * 64
U0, U1 = "GPU-e0ec50b6-f483-68ed-fb7b-ecc8879a76a1", "GPU-d7b915ba-0fcc-7de5-ad60-046e8236bde5"
GPUS = (Gpu(index=0, uuid=U0), Gpu(index=1, uuid=U1))


def ws(name: str, **kw: object) -> ContainerInfo:
    base = ContainerInfo(
        id=name * 12, name=f"gpufleet-ws-{name}", image=f"reg/pt@{PINNED}", image_digest=PINNED,
        workspace=name, user=f"u{name}", uid=2001, ports=("127.0.0.1:28101->8888/tcp",),
        memory_bytes=1 << 29, jupyter_status=403, jupyter_uids=(2001,), ssh_password_auth=False,
        ssh_root_login="no", pids=(100, 101),
    )
    if "gpus" in kw and "assigned_gpus" not in kw:
        kw["assigned_gpus"] = kw["gpus"]  # as the role labels them
    return dataclasses.replace(base, **kw)  # type: ignore[arg-type]


def gf8(*containers: ContainerInfo, declared: dict[str, str | None] | None = None,
        processes: tuple[GpuProcess, ...] = (),
        docker: DockerInfo | None = None) -> list[tuple[str, str]]:  # fmt: skip
    facts = Facts(gpus=GPUS, containers=containers, gpu_processes=processes, docker=docker)
    spec = HostSpec(name="h1", address="h1", expect=Expectations(
        pytorch_image="reg/pt:1", pytorch_image_digest=PINNED, workspaces=declared))
    report = Report(hosts={"h1": HostResult("h1", "ok", facts=facts)}, specs={"h1": spec})
    return [(f.rule, f.message) for f in evaluate(report) if f.rule.startswith("GF8")]


def rules(*a: ContainerInfo, **kw: object) -> list[str]:
    return [r for r, _ in gf8(*a, **kw)]  # type: ignore[arg-type]


def test_healthy_workspaces_give_nothing() -> None:
    assert gf8(ws("a", gpus=("0",)), ws("b", gpus=(U1,)), declared={"a": PINNED, "b": PINNED}) == []


def test_gf801_stale_or_unpinned_digest_but_not_a_declared_override() -> None:
    ((rule, msg),) = gf8(ws("a", image=f"reg/pt@{STALE}", image_digest=STALE))
    assert rule == "GF801" and f"workspace a runs {STALE}, the inventory pins {PINNED}" in msg
    assert rules(ws("a", image="reg/pt:1", image_digest=None)) == ["GF801"]
    assert rules(ws("a", image=f"reg/pt@{STALE}", image_digest=STALE),
                 declared={"a": STALE}) == []


def test_gf802_a_gpu_in_two_workspaces_by_index_and_uuid() -> None:
    ((rule, msg),) = gf8(ws("a", gpus=("0",)), ws("b", gpus=(U0, U1)))
    assert rule == "GF802" and f"GPU 0 ({U0}) is assigned to workspaces a, b" in msg
    assert rules(ws("a", gpus=("all",)), ws("b", gpus=("1",))) == ["GF802"]


def test_gf803_foreign_container_or_process_on_a_workspace_gpu() -> None:
    other = ContainerInfo(id="f" * 64, name="trainer", gpus=("1",))
    ((rule, msg),) = gf8(ws("a", gpus=(U1,)), other)
    assert rule == "GF803" and "also used by container trainer" in msg
    stranger = GpuProcess(pid=999, name="python3", gpu_uuid=U1)
    own = GpuProcess(pid=101, name="python3", gpu_uuid=U1)
    assert rules(ws("a", gpus=("1",)), processes=(own,)) == []
    ((rule, msg),) = gf8(ws("a", gpus=("1",)), processes=(own, stranger))
    assert rule == "GF803" and "process 999 (python3)" in msg


def test_gf804_to_gf807_and_gf809() -> None:
    assert rules(ws("a", jupyter_status=200)) == ["GF804"]
    assert rules(ws("a", ssh_password_auth=True)) == ["GF805"]
    assert rules(ws("a", memory_bytes=0)) == ["GF806"]
    assert rules(ws("a", jupyter_uids=(0,))) == ["GF807"]
    assert rules(ws("a", user="root", uid=0)) == ["GF807"]
    assert rules(ws("a", jupyter_status=None, check_error="check exited 126")) == ["GF809"]


def test_gf808_declared_but_not_running() -> None:
    ((rule, msg),) = gf8(ws("a"), declared={"a": PINNED, "b": PINNED})
    assert rule == "GF808" and "workspace b is declared but not running" in msg


def test_gf810_a_gpu_less_workspace_that_reaches_every_gpu_under_the_nvidia_runtime() -> None:
    """F10/M11: no device request, the image's NVIDIA_VISIBLE_DEVICES=all, nvidia runtime."""
    carol = ws("c", gpu_env="all", runtime="nvidia")
    ((rule, msg),) = gf8(carol)
    assert rule == "GF810"
    assert f"workspace c reaches GPU 0 ({U0}), GPU 1 ({U1}), assigned no GPU" in msg
    # the engine's default runtime counts where the container names none
    nvidia_default = DockerInfo(server_version="28.2.2", default_runtime="nvidia")
    assert rules(ws("c", gpu_env="all"), docker=nvidia_default) == ["GF810"]
    # and it shares GPU 1 with a workspace that was given it
    assert sorted(rules(carol, ws("a", gpus=("1",)))) == ["GF802", "GF810"]


def test_gf810_quiet_for_void_runc_or_the_assigned_gpus() -> None:
    assert rules(ws("c", gpu_env="void", runtime="nvidia")) == []
    assert rules(ws("c", gpu_env="all", runtime="runc")) == []
    assert rules(ws("c", gpu_env="all")) == []  # no docker facts: runc assumed
    assert rules(ws("a", gpus=(U1,), gpu_env="all", runtime="nvidia")) == []  # the request wins
    ((rule, _),) = gf8(ws("a", gpus=("0", "1"), assigned_gpus=("0",)))
    assert rule == "GF810"
