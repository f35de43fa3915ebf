"""GF8xx: workspace containers (pytorch_workspace role) against the pin and the safety settings.

Facts: Facts.containers (probe.sh's `containers` and `workspace_checks` sections). A workspace is
a running container with the label gpufleet.workspace. Its GPUs are what it really reaches
(`_reach`): its DeviceRequests, else, under the nvidia runtime, its NVIDIA_VISIBLE_DEVICES.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpufleet.model import ContainerInfo, Facts, Finding
from gpufleet.rules.base import Ctx, finding

# The ids this module emits (tests/unit/test_rules_plumbing.py holds it to that).
RULES: tuple[str, ...] = ("GF801", "GF802", "GF803", "GF804", "GF805", "GF806", "GF807", "GF808",
                          "GF809", "GF810")
# NVIDIA Container Toolkit, legacy mode: these values (and unset) give no GPU (NVIDIA/
# cloud-native-docs container-toolkit/docker-specialized.md, "GPU Enumeration").
_NO_GPU = {"", "void", "none"}


def _reach(c: ContainerInfo, facts: Facts) -> tuple[str, ...]:
    """The GPUs a container really has. A device request decides where there is one (the
    engine then sets NVIDIA_VISIBLE_DEVICES itself); without one, the nvidia runtime (the
    container's, else the engine's default) honours the Env, which CUDA images set to "all"."""
    if c.gpus:
        return c.gpus
    runtime = c.runtime or (facts.docker.default_runtime if facts.docker else None)
    if runtime != "nvidia" or c.gpu_env is None or c.gpu_env.strip().lower() in _NO_GPU:
        return ()
    return tuple(g.strip() for g in c.gpu_env.split(",") if g.strip())


def _canonical(gpu: str, facts: Facts) -> tuple[str, ...]:
    """A device request's ID -> the GPU(s) it names, as UUIDs where the facts know them."""
    if gpu == "all":
        return tuple(g.uuid or str(g.index) for g in facts.gpus) or ("all",)
    for g in facts.gpus:
        if gpu in (str(g.index), g.uuid):
            return (g.uuid or str(g.index),)
    return (gpu,)


def _label(gpu: str, facts: Facts) -> str:
    for g in facts.gpus:
        if gpu in (str(g.index), g.uuid):
            return f"GPU {g.index} ({g.uuid})" if g.uuid else f"GPU {g.index}"
    return f"GPU {gpu}"


def check(ctx: Ctx) -> Iterator[Finding]:
    for h, f in ctx.with_facts():
        yield from _host(ctx, h.name, f)


def _host(ctx: Ctx, name: str, f: Facts) -> Iterator[Finding]:
    e = ctx.expect(name)
    workspaces = [c for c in f.containers if c.workspace]
    for c in workspaces:
        yield from _one(name, c, e.workspaces, e.pytorch_image_digest, e.pytorch_image)
    # GPUs: two workspaces, or a workspace and a foreign container or process
    owners: dict[str, list[ContainerInfo]] = {}
    for c in workspaces:
        reach = {u for g in _reach(c, f) for u in _canonical(g, f)}
        for gpu in reach:
            owners.setdefault(gpu, []).append(c)
        given = {u for g in c.assigned_gpus for u in _canonical(g, f)}
        if extra := sorted(reach - given, key=lambda g: _label(g, f)):
            yield finding(
                "GF810", [name],
                f"{name}: workspace {c.workspace} reaches {', '.join(_label(g, f) for g in extra)}"
                f", assigned {', '.join(c.assigned_gpus) or 'no GPU'}",
                {"workspace": c.workspace, "container": c.name, "gpus": extra,
                 "assigned": list(c.assigned_gpus), "gpu_env": c.gpu_env,
                 "runtime": c.runtime}, workspace=c.workspace)
    for gpu, cs in sorted(owners.items()):
        if len(cs) > 1:
            names = sorted(str(c.workspace) for c in cs)
            yield finding(
                "GF802", [name],
                f"{name}: {_label(gpu, f)} is assigned to workspaces {', '.join(names)}",
                {"gpu": gpu, "workspaces": names}, gpu=gpu,
            )
    foreign = [c for c in f.containers if not c.workspace and _reach(c, f)]
    ws_pids = {p for c in workspaces for p in c.pids}
    for gpu, cs in sorted(owners.items()):
        users = [f"container {c.name}" for c in foreign
                 if gpu in {u for g in _reach(c, f) for u in _canonical(g, f)}]
        if ws_pids:  # without the workspaces' PIDs no process can be told apart
            users += [f"process {p.pid} ({p.name})" for p in f.gpu_processes
                      if p.gpu_uuid and gpu in _canonical(p.gpu_uuid, f) and p.pid not in ws_pids]
        if users:
            names = sorted(str(c.workspace) for c in cs)
            yield finding(
                "GF803", [name],
                f"{name}: {_label(gpu, f)} of workspace {', '.join(names)} is also used by "
                + ", ".join(users),
                {"gpu": gpu, "workspaces": names, "others": users}, gpu=gpu,
            )
    running = {c.workspace for c in workspaces}
    for ws in sorted(set(e.workspaces or {}) - running):
        yield finding(
            "GF808", [name], f"{name}: workspace {ws} is declared but not running",
            {"workspace": ws, "variable": "pytorch_workspaces"}, workspace=ws,
        )


def _one(
    host: str, c: ContainerInfo, declared: object, pinned: str | None, image: str | None
) -> Iterator[Finding]:
    ws = str(c.workspace)
    want = declared.get(ws) if isinstance(declared, dict) and ws in declared else pinned
    ev = {"workspace": ws, "container": c.name}
    if want and c.image_digest != want:
        have = c.image_digest or f"{c.image} (no digest)"
        yield finding(
            "GF801", [host], f"{host}: workspace {ws} runs {have}, the inventory pins {want}",
            {**ev, "actual": c.image, "expected": want, "variable": "pytorch_image_digest"},
            workspace=ws, expected=want,
        )
    if c.jupyter_status is not None and 200 <= c.jupyter_status < 300:
        yield finding(
            "GF804", [host],
            f"{host}: Jupyter of workspace {ws} answers without a token "
            f"(HTTP {c.jupyter_status} for /api/contents)",
            {**ev, "status": c.jupyter_status, "ports": list(c.ports)}, workspace=ws,
        )
    if c.ssh_password_auth:
        yield finding(
            "GF805", [host], f"{host}: sshd of workspace {ws} accepts passwords",
            {**ev, "ports": list(c.ports)}, workspace=ws,
        )
    if c.memory_bytes <= 0:
        yield finding(
            "GF806", [host], f"{host}: workspace {ws} has no memory limit",
            ev, workspace=ws,
        )
    root = c.user == "root" or c.uid == 0 or 0 in c.jupyter_uids
    if root:
        yield finding(
            "GF807", [host],
            f"{host}: workspace {ws} runs as root (user {c.user}, Jupyter uids "
            f"{list(c.jupyter_uids)})",
            {**ev, "user": c.user, "uid": c.uid, "jupyter_uids": list(c.jupyter_uids)},
            workspace=ws,
        )
    if c.check_error:
        yield finding(
            "GF809", [host], f"{host}: workspace {ws} could not be checked inside: "
            f"{c.check_error}", {**ev, "error": c.check_error}, workspace=ws,
        )
