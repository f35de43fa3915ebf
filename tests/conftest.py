"""Shared test configuration. Fleet fixtures live in tests/fleet/conftest.py."""

from __future__ import annotations

import os
import signal
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

# A runner started in the background by a non-interactive shell (`cmd &`) inherits SIGINT
# ignored (POSIX), and so would every process the tests start: the Ctrl-C tests would then test
# nothing but that. Python's own handler here gives children the default disposition on exec.
signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO


@pytest.fixture(scope="session")
def fixtures_dir() -> Path:
    return FIXTURES


# ----------------------------------------------------------------- parallel runs (pytest -n 2)
# scripts/test.sh runs the suite on two xdist workers. A work unit is a module, or every module
# that uses one session harness (one engine + registry, one sshd fleet, one sshd lab, one role
# target): no harness starts twice (the sshd lab's addresses are fixed) and module fixtures stay
# whole. The scheduler only sees test ids, so the modules of a harness are listed here, and
# collection checks the list against the fixtures the modules really use. Units are handed out
# longest first (seconds measured in a two-worker run) so that the last to finish is short; the
# three localize modules (8-host torch worlds, CPU-bound on both cores) alternate with the
# Ansible labs (about one core, much of it waiting on SSH): in the old order two of them ran at
# once (nofloor and rails, ~280 s of overlap), each taking ~1.75x its time alone, and their
# verdicts compare bandwidths measured under that load.
HARNESS_MODULES = {
    "role_lab": ("tests/ansible/test_ansible_roles.py",),
    "docker_lab": ("tests/docker/test_docker_lab.py", "tests/docker/test_image_facts.py",
                   "tests/docker/test_image_roles.py", "tests/docker/test_image_smoke.py"),
    "fleet": ("tests/fleet/test_become_fleet.py", "tests/fleet/test_fleet_facts.py",
              "tests/fleet/test_fleet_fixture.py", "tests/fleet/test_smoke_fleet.py"),
    "sshd_lab": ("tests/transport/test_hostile_ssh.py", "tests/transport/test_ssh.py",
                 "tests/transport/test_sweep.py"),
}
UNIT_OF = {module: unit for unit, modules in HARNESS_MODULES.items() for module in modules}
LONGEST_FIRST = (  # seconds: 634e192's CI-style run (/tmp/ciprof.log, -n 2, module totals)
    "role_lab",  # 572 s: tests/ansible/test_ansible_roles.py
    "tests/fleet/test_localize_fleet.py",  # 314 s
    "tests/ansible/test_ansible_rocky.py",  # 356 s
    "tests/fleet/test_localize_nofloor.py",  # 312 s
    "tests/ansible/test_ansible_ubuntu_graph.py",  # 337 s
    "tests/fleet/test_localize_rails.py",  # 277 s
    "tests/docker/test_workspaces.py",  # 226 s
    "tests/slurm/test_slurm.py",  # 212 s
    "docker_lab",  # 207 s
    "tests/unit/test_smoke_deep_runs.py",  # 98 s
    "tests/ansible/test_healthcheck_wrapper.py",  # 89 s
    "fleet",  # 60 s
    "tests/ansible/test_ansible_static.py",  # 57 s
    "tests/ansible/test_ansible_rocky8.py",  # 45 s
    "tests/unit/test_smoke_runner.py",  # 40 s
    "tests/slurm/test_slurm_deepcheck.py",  # 40 s
    "tests/fleet/test_remediate.py",  # 32 s
    "tests/fleet/test_fleet_html.py",  # 29 s
)


def unit_of(nodeid: str) -> str:
    module = nodeid.split("::", 1)[0]
    return UNIT_OF.get(module, module)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    units: dict[str, list[pytest.Item]] = {}
    for item in items:
        units.setdefault(unit_of(item.nodeid), []).append(item)
        harness = next((h for h in HARNESS_MODULES if h in getattr(item, "fixturenames", ())), None)
        if harness is not None and unit_of(item.nodeid) != harness:
            raise pytest.UsageError(
                f"{item.nodeid} uses the session harness {harness!r}: add its module to "
                f"HARNESS_MODULES[{harness!r}] in tests/conftest.py (parallel runs keep a "
                "harness on one worker)")
    rank = {unit: i for i, unit in enumerate(LONGEST_FIRST)}
    order = sorted(units, key=lambda unit: rank.get(unit, len(rank)))  # stable: rest as collected
    items[:] = [it for unit in order for it in units[unit]]


@pytest.hookimpl(optionalhook=True)  # xdist's hook: pytest without xdist (a GPU box) runs on
def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """Load-scope scheduling by the units above, in collection order (already longest first)."""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415  (only under -n)

    class UnitScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    config.option.loadscopereorder = False
    return UnitScheduling(config, log)


@pytest.fixture(autouse=True)
def _dev_null_stays_a_device() -> Iterator[None]:
    """Tests run as root and unshare, chroot and bind-mount: a rename or unlink that reaches the
    machine's /dev/null (seen once this session: a plain file there, every later apt in a chroot
    then failing on gpgv) breaks every test after it in ways that name the wrong culprit. The
    test during which it happened fails here instead (on two workers: it or the other's)."""
    yield
    mode = os.stat("/dev/null").st_mode
    assert stat.S_ISCHR(mode), ("/dev/null is no longer a character device after this test "
                                "(mknod -m 666 /dev/null c 1 3 restores it)")


@pytest.fixture(autouse=True)
def _sigint_still_raises() -> Iterator[None]:
    """A library that takes over SIGINT in this process (ansible_runner.run() does, for good)
    makes every later Ctrl-C test on the worker fail far from the cause: the test that left the
    handler changed fails here, and the handler goes back."""
    yield
    handler = signal.getsignal(signal.SIGINT)
    if handler is not signal.default_int_handler:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        pytest.fail(f"this test left SIGINT's handler changed ({handler!r}); put it back")


@pytest.fixture(autouse=True)
def _no_interrupt_leaks() -> Iterator[None]:
    """A test ending in the CLI's Ctrl-C path (in-process main()) sets the transports'
    process-wide CANCEL, which a real gpufleet process exits with; here it would fail every later
    transport of the worker at once, so it does not outlive its test."""
    yield
    from gpufleet.transport._remote import CANCEL  # noqa: PLC0415

    CANCEL.clear()
