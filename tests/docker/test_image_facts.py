"""Facts from the real engine over SSH, and digest drift found for real.

`gpufleet facts` on the target reads the lab's dockerd: server version, runtimes, default runtime,
the pinned image's RepoDigests and its Env (image.env, for rules about NCCL settings). Re-tagging a
different image under the pinned tag is GF105; tagging the pinned one back clears it.
"""

from __future__ import annotations

import pytest
from dockerlib import DockerLab
from imagetarget import HOSTS, ImageTarget, PlayResult

from conftest import report_json

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def tagged(converged: PlayResult, docker_lab: DockerLab) -> DockerLab:
    """The pinned image present and its tag pointing at it (what the role leaves)."""
    assert converged.rc == 0, f"converge failed; see test_image_roles.py\n{converged.tail()}"
    docker_lab.pull_test_image()
    docker_lab.docker("tag", docker_lab.pinned, docker_lab.ref)
    return docker_lab


def test_facts_come_from_the_real_engine(image_target: ImageTarget, tagged: DockerLab) -> None:
    proc = image_target.cli("facts", "-l", HOSTS[0], "--format", "json")
    host = report_json(proc)["hosts"][HOSTS[0]]  # type: ignore[index]
    assert host["status"] == "ok", host
    facts = host["facts"]
    info = tagged.info()
    assert facts["docker"]["server_version"] == info["ServerVersion"]
    assert facts["docker"]["runtimes"] == sorted(info["Runtimes"])  # type: ignore[arg-type]
    assert "nvidia" in facts["docker"]["runtimes"]  # merged into daemon.json by the roles
    assert facts["docker"]["default_runtime"] == "runc"
    assert facts["image"]["ref"] == tagged.ref
    assert facts["image"]["digests"] == [tagged.pinned]
    assert "NCCL_DEBUG=WARN" in facts["image"]["env"]
    assert "NVIDIA_VISIBLE_DEVICES=all" in facts["image"]["env"]
    assert "docker" not in facts["errors"] and "image" not in facts["errors"], facts["errors"]


def test_retagging_a_different_image_under_the_pinned_tag_is_gf105(
    image_target: ImageTarget, tagged: DockerLab
) -> None:
    other = tagged.push_variant("drift", "not the pinned build")
    repo = tagged.ref.rsplit(":", 1)[0]
    tagged.docker("tag", f"{repo}:drift", tagged.ref)  # the pinned tag now names another image
    try:
        proc = image_target.cli("check", "--level", "facts", "-l", HOSTS[0], "--format", "json")
        report = report_json(proc)
        gf105 = [f for f in report["findings"] if f["rule"] == "GF105"]  # type: ignore[index]
        assert len(gf105) == 1, report["findings"]  # type: ignore[index]
        assert gf105[0]["hosts"] == [HOSTS[0]]
        assert gf105[0]["evidence"]["actual"] == [f"{repo}@{other}"]
        assert gf105[0]["evidence"]["expected"] == tagged.digest
        assert proc.returncode == 1
    finally:
        tagged.docker("tag", tagged.pinned, tagged.ref)
        tagged.docker("image", "rm", f"{repo}:drift")
    healed = report_json(image_target.cli("check", "--level", "facts", "-l", HOSTS[0],
                                          "--format", "json"))  # fmt: skip
    assert [f for f in healed["findings"] if f["rule"] == "GF105"] == []  # type: ignore[index]
