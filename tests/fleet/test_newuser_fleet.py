"""Issue 37 over the real sshd fleet: the seams a new user hits first fail closed (a `-l` typo,
a misspelt variable, an unknown host key, a bad run store) instead of passing as HEALTHY."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml
from fleetlib import DESIRED_STATE, Fleet, make_fleet

pytestmark = [pytest.mark.fleet, pytest.mark.slow]


@pytest.fixture(scope="module")
def newfleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    with make_fleet(tmp_path_factory.mktemp("newuser"), [("new01", "h200x2"), ("new02", "h200x2")],
                    group_vars={"h200": {**DESIRED_STATE, "gpufleet_expected_gpu_count": 2}},
                    groups={"new01": "h200", "new02": "h200"}) as f:
        yield f


def test_a_typo_in_one_limit_name_is_exit_2_naming_it(newfleet: Fleet) -> None:
    r = newfleet.run_cli("check", "-i", str(newfleet.inventory), "-l", "new01,neww02", "--level",
                      "facts")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "-l 'neww02' matches no host or group of the inventory (did you mean new02?)" \
        in r.stderr
    assert "HEALTHY" not in r.stdout + r.stderr


def test_misspelt_variables_and_bad_values_are_named_together(newfleet: Fleet) -> None:
    doc = yaml.safe_load(newfleet.inventory.read_text())
    group = doc["all"]["children"]["h200"]["vars"]
    del group["gpufleet_expected_gpu_count"]
    group.update(gpufleet_expected_gpus=8, nvidia_driver_verison="999.1",
                 gpufleet_smoke_runtime="hots")
    bad = newfleet.root / "typo.yml"
    bad.write_text(yaml.safe_dump(doc))
    r = newfleet.run_cli("check", "-i", str(bad), "-l", "new01", "--level", "facts")
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    for line in ("new01: unknown variable gpufleet_expected_gpus "
                 "(did you mean gpufleet_expected_gpu_count?)",
                 "new01: unknown variable nvidia_driver_verison "
                 "(did you mean nvidia_driver_version?)",
                 "new01: gpufleet_smoke_runtime='hots' is not one of docker, host"):
        assert line in r.stderr, r.stderr
