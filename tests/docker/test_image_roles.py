"""The container roles against a real engine and registry.

Over SSH on the debootstrap target that reaches the lab's engine (socket, pidfile and /etc/docker
bind-mounted; no systemd): container_runtime installs Debian's docker.io and, with
nvidia_container_toolkit (stand-in packages from the local signed mirror), merges daemon.json,
which the running dockerd re-reads on SIGHUP; pytorch_image pulls repository@digest from the
registry and verifies RepoDigests. Then locally (connection local, DOCKER_HOST), and a tag that
points elsewhere in the registry is refused before anything is pulled.
"""

from __future__ import annotations

import json
import re

import pytest
from dockerlib import DOCKER, DockerLab
from imagetarget import ImageTarget, PlayResult

from conftest import IMAGE_TAGS, SITE

pytestmark = [pytest.mark.docker, pytest.mark.ansible, pytest.mark.slow]


def test_converge_pulls_the_image_by_digest_from_the_registry(converged: PlayResult,
                                                              docker_lab: DockerLab) -> None:
    h = converged.host()
    assert converged.rc == 0 and h["failed"] == 0, converged.tail()
    assert "TASK [gpufleet.gpu.pytorch_image : Pull the image by digest]" in converged.output
    assert f"{docker_lab.ref} points to {docker_lab.digest} in the registry" in converged.flat
    digests = json.loads(docker_lab.docker("image", "inspect", "--format", "{{json .RepoDigests}}",
                                           docker_lab.ref).stdout)  # fmt: skip
    assert docker_lab.pinned in digests


def test_cuda_preflight_without_a_driver_says_it_has_nothing_to_compare(
        converged: PlayResult) -> None:
    assert converged.rc == 0, converged.tail()
    assert "NOT COMPARED: no NVIDIA driver on this host" in converged.flat, converged.tail()


def test_daemon_json_is_merged_and_the_running_dockerd_reloads_it(
    converged: PlayResult, docker_lab: DockerLab
) -> None:
    assert converged.rc == 0, converged.tail()
    data = json.loads(docker_lab.daemon_json.read_text())
    assert data == {
        "registry-mirrors": ["http://127.0.0.1:5000"],  # the administrator's key, kept
        "live-restore": True, "log-driver": "json-file", "log-opts": {"max-size": "10m"},
        "runtimes": {"nvidia": {"args": [], "path": "nvidia-container-runtime"}},
    }  # fmt: skip
    assert docker_lab.engine is not None
    assert f"RELOADED dockerd (pid {docker_lab.engine.pid}) with SIGHUP" in converged.flat
    # log-driver/log-opts are not reloadable (dockerd reference): named, not hidden
    assert ("only a dockerd restart applies (restart it yourself on this host): log-driver, "
            "log-opts.") in converged.flat, converged.tail()
    info = docker_lab.info()  # the real daemon's view after the reload
    assert "nvidia" in info["Runtimes"], info["Runtimes"]  # type: ignore[operator]
    assert info["LiveRestoreEnabled"] is True


def test_a_dockerd_older_than_the_nvidia_hook_is_named_before_any_container_starts(
    converged: PlayResult, docker_lab: DockerLab
) -> None:
    """H2: dockerd registers --gpus only at start, if nvidia-container-runtime-hook is on PATH then;
    the lab's engine started before the toolkit was installed. The engine's handlers run at the end
    of nvidia_container_toolkit, before pytorch_image (and pytorch_workspace) start containers, and
    without systemd the needed restart is named instead of a SIGHUP passing for it."""
    assert converged.rc == 0, converged.tail()
    assert docker_lab.engine is not None
    named = (f"RESTART NEEDED: dockerd (pid {docker_lab.engine.pid}) started before "
             "/usr/bin/nvidia-container-runtime-hook was installed")
    assert named in converged.flat, converged.tail()
    out = converged.output
    handler = out.index("RUNNING HANDLER [gpufleet.gpu.container_runtime : Reload dockerd")
    assert handler < out.index("TASK [gpufleet.gpu.pytorch_image"), converged.tail()


def test_second_run_changes_nothing(converged: PlayResult, image_target: ImageTarget) -> None:
    assert converged.rc == 0, converged.tail()
    again = image_target.play(SITE, "idempotence", "--tags", IMAGE_TAGS,
                              extra_vars=image_target.host_vars())
    assert again.rc == 0 and again.host()["changed"] == 0, again.tail()
    assert "RELOADED dockerd" not in again.flat


def test_a_tag_pointing_to_another_digest_is_refused(
    converged: PlayResult, image_target: ImageTarget, docker_lab: DockerLab
) -> None:
    assert converged.rc == 0, converged.tail()
    moved = docker_lab.push_variant("moved", "another build")
    tag = docker_lab.ref.rsplit(":", 1)[0] + ":moved"
    docker_lab.docker("image", "rm", tag)
    extra = image_target.host_vars() | {"pytorch_image": tag}
    res = image_target.play(SITE, "moved-tag", "--tags", "pytorch_image", extra_vars=extra)
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    assert (f"Refused: {extra['pytorch_image']} points to {moved} in the registry, but "
            f"pytorch_image_digest is {docker_lab.digest}") in res.flat, res.tail()
    assert "Pull the image by digest" not in res.output
    assert res.host()["changed"] == 0


def _push_index(lab: DockerLab, tag: str, digests: list[str]) -> str:
    """A two-platform index (the second manifest annotated arm64) under repo:tag; its digest."""
    repo = lab.ref.rsplit(":", 1)[0]
    lab.docker("manifest", "rm", f"{repo}:{tag}", check=False)
    members = [f"{repo}@{d}" for d in digests]
    lab.docker("manifest", "create", "--insecure", f"{repo}:{tag}", *members)
    lab.docker("manifest", "annotate", "--arch", "arm64", f"{repo}:{tag}", members[1])
    pushed = lab.docker("manifest", "push", "--insecure", "--purge", f"{repo}:{tag}").stdout
    return pushed.strip().splitlines()[-1]


def test_a_moved_multi_platform_tag_is_refused_whatever_the_pin_names(
    converged: PlayResult, image_target: ImageTarget, docker_lab: DockerLab
) -> None:
    """Issue 23 L8: a multi-platform tag shows only its platforms' digests. Pinned by the index
    digest it passes (the registry says the pin is an index of the same manifests); pinned by a
    platform of the index the tag pointed to before, it is refused (it used to pass silently)."""
    assert converged.rc == 0, converged.tail()
    repo = docker_lab.ref.rsplit(":", 1)[0]
    second = docker_lab.push_variant("l8-second", "second platform")
    index = _push_index(docker_lab, "multi", [docker_lab.digest, second])
    extra = image_target.host_vars() | {"pytorch_image": f"{repo}:multi"}
    # --check: the comparison runs, nothing is pulled.
    same = image_target.play(SITE, "index-pin", "--check", "--tags", "pytorch_image",
                             extra_vars=extra | {"pytorch_image_digest": index})
    assert same.rc == 0 and same.host()["failed"] == 0, same.tail()
    assert f"{repo}:multi points to a multi-platform index of" in same.flat, same.tail()
    assert "in the registry: the pin (the same index)" in same.flat, same.tail()
    moved = docker_lab.push_variant("l8-moved", "moved build")
    _push_index(docker_lab, "multi", [moved, second])
    res = image_target.play(SITE, "index-moved", "--tags", "pytorch_image", extra_vars=extra)
    assert res.rc != 0 and res.host()["failed"] == 1, res.tail()
    # The index lists its platforms in the registry's order, not the order they were given in.
    listed = re.search(r"points to a multi-platform index of (\S+), (\S+) in the registry, but "
                       rf"pytorch_image_digest is {docker_lab.digest} \(a single manifest\)",
                       res.flat)
    assert listed and {listed[1], listed[2]} == {moved, second}, res.tail()
    assert "Pull the image by digest" not in res.output


def test_a_loopback_http_registry_needs_no_insecure_flag(
    converged: PlayResult, image_target: ImageTarget, docker_lab: DockerLab
) -> None:
    """Issue 23: with pytorch_image_registry_insecure false the role said "could not ask the
    registry ... (no such manifest ...)" for a plain-HTTP registry on 127.0.0.1, whose manifest
    exists. dockerd treats 127.0.0.0/8 as insecure; the role now does too."""
    assert converged.rc == 0, converged.tail()
    extra = image_target.host_vars() | {"pytorch_image_registry_insecure": False}
    res = image_target.play(SITE, "http-registry", "--tags", "pytorch_image", extra_vars=extra)
    assert res.rc == 0 and res.host()["failed"] == 0, res.tail()
    assert f"{docker_lab.ref} points to {docker_lab.digest} in the registry" in res.flat, res.tail()


def test_pulls_locally_where_the_controller_is_the_docker_host(
    converged: PlayResult, image_target: ImageTarget, docker_lab: DockerLab
) -> None:
    """connection local, the engine from DOCKER_HOST: pulled, verified, then changed=0."""
    assert converged.rc == 0, converged.tail()
    docker_lab.docker("image", "rm", "-f", docker_lab.pinned, docker_lab.ref, check=False)
    extra = image_target.host_vars() | {"pytorch_image_docker_command": DOCKER}
    first = image_target.play(SITE, "local", "--tags", "pytorch_image", extra_vars=extra,
                              local=True)
    assert first.rc == 0 and first.host("localhost")["changed"] == 2, first.tail()  # pull, tag
    assert docker_lab.image_present(docker_lab.pinned)
    again = image_target.play(SITE, "local-again", "--tags", "pytorch_image", extra_vars=extra,
                              local=True)
    assert again.rc == 0 and again.host("localhost")["changed"] == 0, again.tail()
