"""Fixtures for the image path against a real Docker engine and registry (dockerlib.py).

`docker_lab` (session): one engine + registry for every test here, the test image built (or taken
from the cache) by build_test_image.py, pushed to the registry and removed from the engine again;
`docker_lab.ref` / `.digest` / `.pinned` name it, `.env` points any docker client at the engine.
`image_target` (session): a Debian 12 debootstrap target (tests/ansible/roletarget.py) with sshd on
two loopback addresses (two inventory hosts, one tree), that reaches the engine: the engine's
socket at /run/docker.sock, its pidfile at /run/docker.pid and its config dir (daemon.json) at
/etc/docker, all bind-mounted in the target's own mount namespace, and the machine's /tmp at /tmp
(the engine resolves bind-mount paths on the machine, so the smoke run dir must be the same path
on both sides).
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import build_test_image
import dockerlib
import pytest
from dockerlib import DockerLab, scratch_workdir
from imagetarget import ImageTarget, PlayResult, start_image_target

__all__ = ["DockerLab", "ImageTarget", "PlayResult"]


@pytest.fixture(scope="session")
def docker_lab() -> Iterator[DockerLab]:
    t0 = time.monotonic()
    archive = build_test_image.build()
    built = time.monotonic() - t0
    with dockerlib.make_lab(daemon_json={"registry-mirrors": ["http://127.0.0.1:5000"]}) as lab:
        lab.provide_test_image(archive)
        print(f"\n[docker_lab] image {built:.1f}s (build or cache), engine+registry+load+push "
              f"{time.monotonic() - t0 - built:.1f}s: {lab.pinned}", file=sys.stderr)
        yield lab


@pytest.fixture(scope="session")
def image_target(docker_lab: DockerLab) -> Iterator[ImageTarget]:
    with scratch_workdir("gpufleet-image-target", "GPUFLEET_IMAGE_TEST_LOGS",
                         "/var/tmp/gpufleet-image-test-logs") as workdir, \
            start_image_target(workdir, docker_lab) as t:
        yield t


def report_json(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    try:
        data = json.loads(proc.stdout)
    except ValueError:
        pytest.fail(f"no JSON report (exit {proc.returncode}); stderr:\n{proc.stderr[-3000:]}")
    assert isinstance(data, dict)
    return data


SITE = "playbooks/site.yml"
IMAGE_TAGS = "container_runtime,nvidia_container_toolkit,pytorch_image"


@pytest.fixture(scope="session")
def converged(image_target: ImageTarget) -> PlayResult:
    """site.yml's container roles converged on img-a over SSH, the image absent beforehand."""
    lab = image_target.lab
    lab.docker("image", "rm", "-f", lab.pinned, lab.ref, check=False)
    assert not lab.image_present(lab.pinned)
    return image_target.play(SITE, "converge", "--tags", IMAGE_TAGS,
                             extra_vars=image_target.host_vars())
