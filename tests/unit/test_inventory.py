"""Inventory through Ansible's own InventoryManager: formats, variables, limits, errors."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpufleet.inventory import InventoryError, load_inventory
from gpufleet.model import HostSpec

INI = """\
[gpu]
gpu01 ansible_host=10.0.0.1 ansible_port=2200 ansible_user=ops
gpu02 ansible_host=10.0.0.2 ansible_ssh_private_key_file=~/.ssh/fleet_ed25519
gpu03 ansible_ssh_common_args='-J jumper@bastion:2222'

[other]
cpu01 ansible_connection=local
cpu02 ansible_ssh_extra_args='-o ProxyJump=bastion2 -o UserKnownHostsFile=/etc/fleet_known_hosts'

[gpu:vars]
nvidia_driver_branch=580
gpufleet_expected_gpu_count=8
gpufleet_min_busbw_gbps=300.5
gpufleet_mig_expected=no
ansible_become=true
ansible_become_user=gpuops
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def by_name(specs: list[HostSpec]) -> dict[str, HostSpec]:
    return {s.name: s for s in specs}


def test_without_sources_it_is_this_machine() -> None:
    assert load_inventory(None) == [
        HostSpec(name="localhost", address="localhost", connection="local")
    ]


def test_ini_connection_and_desired_state_variables(tmp_path: Path) -> None:
    hosts = by_name(load_inventory([str(write(tmp_path / "hosts.ini", INI))]))
    assert list(hosts) == ["gpu01", "gpu02", "gpu03", "cpu01", "cpu02"]  # inventory order
    g1, g2, g3 = hosts["gpu01"], hosts["gpu02"], hosts["gpu03"]
    assert (g1.address, g1.port, g1.user, g1.connection) == ("10.0.0.1", 2200, "ops", "ssh")
    assert g2.key_files == (os.path.expanduser("~/.ssh/fleet_ed25519"),)
    assert g2.port is None and g2.user is None  # left to ~/.ssh/config, as with OpenSSH
    assert g3.address == "gpu03" and g3.proxy_jump == "jumper@bastion:2222"
    assert g1.become and g1.become_user == "gpuops" and g1.groups == ("gpu",)
    assert g1.expect.driver_branch == "580"  # an INI number still compares as text
    assert g1.expect.gpu_count == 8 and g1.expect.min_busbw_gbps == 300.5
    assert g1.expect.mig_expected is False and g1.expect.driver_version is None
    assert hosts["cpu01"].connection == "local" and not hosts["cpu01"].become
    assert hosts["cpu02"].proxy_jump == "bastion2"
    assert hosts["cpu02"].known_hosts_files == ("/etc/fleet_known_hosts",)


def test_yaml_with_templated_variables(tmp_path: Path) -> None:
    inv = write(tmp_path / "hosts.yml", """\
all:
  vars:
    branch: "580"
    nvidia_driver_version: "{{ branch }}.65.06"
    pytorch_image: registry.example/nvidia/pytorch:25.10-py3
    pytorch_image_digest: sha256:0123
  children:
    gpu:
      hosts:
        a:
          ansible_host: 127.0.0.9
          gpufleet_smoke_runtime: host
          gpufleet_smoke_python: /opt/py/bin/python
""")
    (a,) = load_inventory([str(inv)])
    assert a.address == "127.0.0.9"
    assert a.expect.driver_version == "580.65.06"
    assert a.expect.pytorch_image == "registry.example/nvidia/pytorch:25.10-py3"
    assert a.expect.pytorch_image_digest == "sha256:0123"
    assert (a.expect.smoke_runtime, a.expect.smoke_python) == ("host", "/opt/py/bin/python")


def test_directory_with_group_vars_and_host_vars(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    write(inv / "hosts.yml", "gpu:\n  hosts:\n    n1:\n    n2:\n")
    write(inv / "group_vars" / "all.yml", "nvidia_container_toolkit_version: 1.19.1\n")
    write(inv / "group_vars" / "gpu.yml",
          "nvidia_driver_version: 580.95.05\ncontainer_runtime_engine: docker\n"
          "gpufleet_smoke_interface: eth1\n")
    write(inv / "host_vars" / "n2.yml",
          "nvidia_driver_version: 580.159.04\ngpufleet_smoke_address: 10.1.0.2\n"
          "ansible_ssh_common_args: -o StrictHostKeyChecking=no\n")
    n1, n2 = load_inventory([str(inv)])
    assert n1.expect.toolkit_version == "1.19.1" and n1.expect.container_engine == "docker"
    assert n1.expect.driver_version == "580.95.05" and n1.expect.smoke_interface == "eth1"
    assert n2.expect.driver_version == "580.159.04"  # host_vars win, as in Ansible
    assert n2.expect.smoke_address == "10.1.0.2"
    assert n1.strict_host_key_checking and not n2.strict_host_key_checking


@pytest.mark.parametrize(
    ("limit", "expected"),
    [
        ("gpu*", ["gpu01", "gpu02", "gpu03"]),
        ("all:!other", ["gpu01", "gpu02", "gpu03"]),
        ("gpu:&other", []),
        ("~(gpu0[13]|cpu02)", ["gpu01", "gpu03", "cpu02"]),
        ("cpu01,gpu02", ["gpu02", "cpu01"]),
        ("gpu[1:2]", ["gpu02", "gpu03"]),
    ],
)
def test_limit_patterns_read_as_ansible_reads_them(
    tmp_path: Path, limit: str, expected: list[str]
) -> None:
    inv = str(write(tmp_path / "hosts.ini", INI))
    if not expected:
        with pytest.raises(InventoryError, match="leaves us with no hosts to target"):
            load_inventory([inv], limit)
        return
    assert [s.name for s in load_inventory([inv], limit)] == expected


def test_limit_that_matches_nothing_is_named_with_the_nearest_host(tmp_path: Path) -> None:
    with pytest.raises(InventoryError) as info:
        load_inventory([str(write(tmp_path / "hosts.ini", INI))], "gpu04")
    assert str(info.value) == ("-l 'gpu04' matches no host or group of the inventory "
                               "(did you mean gpu01?)")


def test_unparsable_inventory_gives_ansibles_message(tmp_path: Path) -> None:
    bad = write(tmp_path / "bad.ini", "[gpu\nhost1\n")
    with pytest.raises(InventoryError) as info:
        load_inventory([str(bad)])
    text = str(info.value)
    assert "Failed to parse inventory with 'ini' plugin" in text
    assert f"Unable to parse {bad} as an inventory source" in text


def test_missing_inventory_file(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match=r"Unable to parse .*nope\.yml as an inventory source"):
        load_inventory([str(tmp_path / "nope.yml")])


def test_broken_group_vars_is_an_inventory_error(tmp_path: Path) -> None:
    inv = tmp_path / "inv"
    write(inv / "hosts.ini", "[gpu]\nn1\n")
    write(inv / "group_vars" / "gpu.yml", "nvidia_driver_version: [unclosed\n")
    with pytest.raises(InventoryError, match="n1"):
        load_inventory([str(inv)])


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("gpufleet_expected_gpu_count=eight",
         "gpufleet_expected_gpu_count='eight' is not an integer"),
        ("gpufleet_min_busbw_gbps=fast", "is not a number"),
        ("gpufleet_mig_expected=maybe", "is not a boolean"),
        ("ansible_connection=winrm", "ansible_connection='winrm' is not supported"),
        ("ansible_become=yes ansible_become_method=su", "ansible_become_method='su'"),
    ],
)
def test_bad_variable_names_host_and_variable(tmp_path: Path, line: str, message: str) -> None:
    inv = write(tmp_path / "hosts.ini", f"[gpu]\nn1 {line}\n")
    with pytest.raises(InventoryError) as info:
        load_inventory([str(inv)])
    assert str(info.value).startswith("n1: ") and message in str(info.value)


def test_proxy_command_with_ssh_w_is_a_jump(tmp_path: Path) -> None:
    inv = write(tmp_path / "hosts.ini", "[gpu]\nn1 ansible_ssh_common_args='-o ProxyCommand=\"ssh "
                "-W %h:%p -q -p 2022 admin@bastion\"'\n")
    (n1,) = load_inventory([str(inv)])
    assert n1.proxy_jump == "admin@bastion:2022"


def test_host_list_source(tmp_path: Path) -> None:
    specs = load_inventory(["10.0.0.7,10.0.0.8,"])
    assert [(s.name, s.address) for s in specs] == [("10.0.0.7", "10.0.0.7"),
                                                    ("10.0.0.8", "10.0.0.8")]


def test_several_sources_merge(tmp_path: Path) -> None:
    a = write(tmp_path / "a.ini", "[gpu]\nn1\n")
    b = write(tmp_path / "b.yml",
              "gpu:\n  hosts:\n    n2:\n  vars:\n    gpufleet_expected_gpu_count: 2\n")
    n1, n2 = load_inventory([str(a), str(b)])
    assert (n1.name, n2.name) == ("n1", "n2")
    assert n1.expect.gpu_count == 2  # group vars apply to the merged group


def test_ansible_advice_is_not_fatal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = write(tmp_path / "hosts.ini", "[gpu]\ngpu\nn1\n")
    assert [s.name for s in load_inventory([str(inv)])] == ["gpu", "n1"]
    assert "Found both group and host with same name: gpu" in capsys.readouterr().err


def test_one_misspelt_name_in_the_limit_is_an_error_not_a_smaller_fleet(tmp_path: Path) -> None:
    # issue 37.1: ansible-playbook warns and carries on; a verifier must not report one host of two
    inv = write(tmp_path / "hosts.ini", INI)
    with pytest.raises(InventoryError) as info:
        load_inventory([str(inv)], "gpu01,gpu0l,othr")
    assert str(info.value).splitlines() == [
        "-l 'gpu0l' matches no host or group of the inventory (did you mean gpu01?)",
        "-l 'othr' matches no host or group of the inventory (did you mean other?)"]


def test_unknown_names_and_values_outside_choices_are_named_together(tmp_path: Path) -> None:
    inv = write(tmp_path / "hosts.yml", """
gpu:
  hosts:
    n1: {gpufleet_expected_gpus: 8, nvidia_driver_verison: "999.1", fleet_note: free}
    n2: {gpufleet_expected_gpu_count: eight}
  vars:
    gpufleet_smoke_runtime: hots
    container_runtime_engine: dokcer
    nvidia_driver_kernel_modules: "{{ 'open' }}"
    gpufleet_check_args: ["--level", "full"]
""")
    with pytest.raises(InventoryError) as info:
        load_inventory([str(inv)], "n1,n2")
    assert str(info.value).splitlines() == [
        "n1: container_runtime_engine='dokcer' is not one of docker, containerd "
        "(did you mean docker?)",
        "n1: unknown variable gpufleet_expected_gpus (did you mean gpufleet_expected_gpu_count?)",
        "n1: gpufleet_smoke_runtime='hots' is not one of docker, host (did you mean host?)",
        "n1: unknown variable nvidia_driver_verison (did you mean nvidia_driver_version?)",
        "n2: container_runtime_engine='dokcer' is not one of docker, containerd "
        "(did you mean docker?)",
        "n2: gpufleet_smoke_runtime='hots' is not one of docker, host (did you mean host?)",
        "n2: gpufleet_expected_gpu_count='eight' is not an integer"]


def test_empty_inventory(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="has no hosts"):
        load_inventory([str(write(tmp_path / "hosts.yml", "all:\n  hosts: {}\n"))])
