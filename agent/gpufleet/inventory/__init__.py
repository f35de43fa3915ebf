"""Ansible inventory → HostSpec. The only module that imports ansible.

Ansible parses everything (INI, YAML, directories, group_vars/host_vars, --limit patterns), so a
host resolves here exactly as `ansible-playbook -i INV -l LIMIT` would resolve it.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from gpufleet.files import FileError, read_parsed
from gpufleet.inventory import checks, desired
from gpufleet.model import Expectations, HostSpec
from gpufleet.sku.floors import perf_floors

T = TypeVar("T")

LOCALHOST = HostSpec(name="localhost", address="localhost", connection="local")

# ansible_connection values that mean "OpenSSH-compatible SSH" for us.
_SSH_CONNECTIONS = {"ssh", "paramiko", "paramiko_ssh", "smart", "ansible.builtin.ssh",
                    "ansible.builtin.paramiko_ssh"}
_LOCAL_CONNECTIONS = {"local", "ansible.builtin.local"}


class InventoryError(Exception):
    """The inventory cannot be used; the message is Ansible's own where Ansible produced one."""


class ExpectError(Exception):
    """The expectations file (node-local mode, `--expect`) cannot be used; the message says why."""


def default_sources() -> list[str]:
    """The inventory ansible-playbook uses without -i: ANSIBLE_INVENTORY, else ansible.cfg's
    `inventory` (ANSIBLE_CONFIG, ./ansible.cfg, ~/.ansible.cfg, /etc/ansible/ansible.cfg), read
    by ansible-core's own ConfigManager (DEFAULT_HOST_LIST). [] when neither sets it: Ansible's
    built-in /etc/ansible/hosts is not used, so no inventory still means this machine.
    ansible-core is imported only when one of those is there (a node running `facts` or
    `node-check` alone never pays for it, nor needs it): where it is not installed (an agent-only
    node), ANSIBLE_INVENTORY is an error and an ansible.cfg names no inventory anyone uses."""
    candidates = [os.environ.get("ANSIBLE_CONFIG") or "", "ansible.cfg", "~/.ansible.cfg",
                  "/etc/ansible/ansible.cfg"]
    if not os.environ.get("ANSIBLE_INVENTORY") and not any(
            c and Path(c).expanduser().is_file() for c in candidates):
        return []
    try:
        from ansible.config.manager import ConfigManager  # noqa: PLC0415
    except ImportError as exc:
        if os.environ.get("ANSIBLE_INVENTORY"):
            raise InventoryError("ANSIBLE_INVENTORY is set but ansible-core is not installed: "
                                 "install it (pip install ansible-core) or pass -i") from exc
        return []

    # A fresh manager, not ansible.constants: it reads the environment and the working directory
    # of this call, not of the first import.
    value, origin = ConfigManager().get_config_value_and_origin("DEFAULT_HOST_LIST")
    if origin == "default" or not value:
        return []
    return [str(v) for v in value]


def load_inventory(sources: Sequence[str] | None, limit: str | None = None) -> list[HostSpec]:
    """Hosts of `sources` (after `limit`) in inventory order; no sources = `default_sources()`,
    and when Ansible has none either, this machine."""
    if not sources:
        sources = default_sources()
    if not sources:
        if limit and limit not in ("localhost", "all", "*"):
            raise InventoryError(f"--limit {limit!r} needs an inventory (-i, ANSIBLE_INVENTORY or "
                                 "ansible.cfg's inventory)")
        return [LOCALHOST]

    # Heavy imports here so that `gpufleet facts` without -i never pays for ansible.
    from ansible.errors import AnsibleError  # noqa: PLC0415
    from ansible.inventory import manager as inventory_manager  # noqa: PLC0415
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.vars.manager import VariableManager  # noqa: PLC0415

    from ansible import constants as C  # noqa: PLC0415

    # A source that fails to parse must stop us, not silently shrink the fleet.
    C.INVENTORY_UNPARSED_IS_FAILED = True
    loader = DataLoader()
    with _capture_warnings(inventory_manager) as warnings:
        try:
            inventory = inventory_manager.InventoryManager(loader=loader, sources=list(sources))
        except AnsibleError as exc:
            raise InventoryError(_join(str(exc), warnings)) from exc
        if warnings:
            raise InventoryError(_join(None, warnings))
    had_hosts = bool(inventory.list_hosts("all"))
    problems: list[str] = []
    if limit and had_hosts:
        with _capture_warnings(inventory_manager):  # the pattern is named in our own words
            problems += checks.limit_problems(inventory, limit)
    with _capture_warnings(inventory_manager) as warnings:
        try:
            if limit:
                inventory.subset(limit)
            hosts = inventory.list_hosts("all")
        except AnsibleError as exc:
            raise InventoryError(_join(str(exc), warnings)) from exc
    if not had_hosts:
        raise InventoryError(f"inventory {', '.join(sources)} has no hosts")
    if not hosts and not problems:
        # Ansible's own wording (ansible/cli/__init__.py get_host_list).
        raise InventoryError(_join(
            "Specified inventory, host pattern and/or --limit leaves us with no hosts to target.",
            warnings))
    for warning in warnings:  # e.g. one misspelt name in -l: Ansible warns and goes on
        inventory_manager.display.warning(warning)

    variables = VariableManager(loader=loader, inventory=inventory)
    specs = []
    for host in hosts:  # every host's problems, not the first one's
        try:
            hostvars = variables.get_vars(host=host, include_hostvars=False)
        except AnsibleError as exc:
            problems.append(f"{host.name}: {exc}")
            continue
        problems += checks.variable_problems(host.name, hostvars)
        try:
            specs.append(_spec(host.name, hostvars, _templater(loader, hostvars)))
        except InventoryError as exc:
            problems.append(str(exc))
    if problems:
        raise InventoryError(checks.join(problems))
    return specs


# Warnings that mean hosts went missing: ansible-playbook carries on, a verifier must not.
_FATAL_WARNINGS = ("Unable to parse", "Could not match supplied host pattern",
                   "No inventory was parsed", "Failed to parse", "Skipping invalid")


@contextmanager
def _capture_warnings(module: Any) -> Iterator[list[str]]:
    """Collect the parse failures Ansible only prints as warnings, so we can report them."""
    real = module.display
    collected: list[str] = []

    class Recorder:
        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def warning(self, msg: str, *args: Any, **kwargs: Any) -> None:
            if msg.startswith(_FATAL_WARNINGS):
                collected.append(msg)
            else:  # advice such as "Found both group and host with same name": Ansible's way
                real.warning(msg, *args, **kwargs)

        def error_as_warning(self, msg: str | None, exception: BaseException,
                             *args: Any, **kwargs: Any) -> None:
            collected.append(f"{msg} {_exception_text(exception)}" if msg else str(exception))

    module.display = Recorder()
    try:
        yield collected
    finally:
        module.display = real


def _exception_text(exc: BaseException) -> str:
    parts = [str(exc)]
    cause = exc.__cause__
    while cause is not None:
        text = str(cause)
        if text and text not in parts:
            parts.append(text)
        cause = cause.__cause__
    return ": ".join(parts)


def _join(head: str | None, warnings: Sequence[str]) -> str:
    lines = [w for w in warnings if w != head]
    if head:
        lines.append(head)
    return "\n".join(dict.fromkeys(lines))


def _templater(loader: Any, hostvars: Mapping[str, Any]) -> Callable[[Any], Any]:
    templar = None

    def render(value: Any) -> Any:
        nonlocal templar
        if not (isinstance(value, str) and "{{" in value):
            return value
        from ansible.errors import AnsibleError  # noqa: PLC0415
        from ansible.template import Templar  # noqa: PLC0415

        if templar is None:
            templar = Templar(loader=loader, variables=hostvars)
        try:
            return templar.template(value)
        except AnsibleError as exc:
            raise InventoryError(f"cannot template {value!r}: {exc}") from exc

    return render


class _Vars:
    """One host's variables, read as Ansible reads them: templated, "" and None mean unset, a
    value of the wrong type is an InventoryError naming the host and the variable."""

    def __init__(self, name: str, hostvars: Mapping[str, Any],
                 render: Callable[[Any], Any]) -> None:
        self.name, self._vars, self._render = name, hostvars, render

    def var(self, *keys: str) -> Any:
        for key in keys:
            if key in self._vars and self._vars[key] is not None:
                return self._render(self._vars[key])
        return None

    def text(self, *keys: str) -> str | None:
        value = self.var(*keys)
        return None if value is None or value == "" else str(value)

    def fail(self, key: str, value: Any, want: str) -> InventoryError:
        return InventoryError(f"{self.name}: {key}={value!r} is not {want}")

    def converted(self, key: str, convert: Callable[[str], T], want: str) -> T | None:
        value = self.var(key)
        if value is None or value == "":
            return None
        try:
            return convert(str(value))
        except ValueError:
            raise self.fail(key, value, want) from None

    def integer(self, key: str) -> int | None:
        return self.converted(key, int, "an integer")

    def flag(self, key: str, default: bool = False) -> bool:
        value = self.var(key)
        if value is None or value == "":
            return default
        from ansible.module_utils.parsing.convert_bool import boolean  # noqa: PLC0415

        try:
            return bool(boolean(value, strict=True))
        except TypeError:
            raise self.fail(key, value, "a boolean") from None

    def desired(self, v: desired.Var) -> Any:
        """The value of v for Expectations; None leaves the field's default."""
        if v.kind == "int":
            return self.integer(v.name)
        if v.kind == "number":
            return self.converted(v.name, float, "a number")
        if v.kind == "flag":
            return self.flag(v.name)
        if v.kind == "workspaces":
            return _workspaces(self.var(v.name), self.text("pytorch_image_digest"))
        if v.kind == "floors":
            value = self.var(v.name)
            if value is None or value == "":
                return None
            try:
                return perf_floors(value)
            except ValueError as exc:
                raise InventoryError(f"{self.name}: {v.name}: {exc}") from None
        return self.text(v.name)


def _spec(name: str, hostvars: Mapping[str, Any], render: Callable[[Any], Any]) -> HostSpec:
    h = _Vars(name, hostvars, render)
    var, text, fail, integer, flag = h.var, h.text, h.fail, h.integer, h.flag
    connection = text("ansible_connection") or "ssh"
    if connection in _LOCAL_CONNECTIONS:
        kind = "local"
    elif connection in _SSH_CONNECTIONS:
        kind = "ssh"
    else:
        raise InventoryError(
            f"{name}: ansible_connection={connection!r} is not supported (use ssh or local)")

    ssh_args: list[str] = []
    for key in ("ansible_ssh_common_args", "ansible_ssh_extra_args"):
        raw = text(key)
        if raw:
            try:
                ssh_args += shlex.split(raw)
            except ValueError as exc:
                raise fail(key, raw, f"valid shell words ({exc})") from None
    ssh = _parse_ssh_args(ssh_args)

    port = integer("ansible_port") if var("ansible_port") is not None else None
    if port is None and var("ansible_ssh_port") is not None:
        port = integer("ansible_ssh_port")
    if port is None and ssh.get("port"):
        if not str(ssh["port"]).isdigit() or not 0 < int(ssh["port"]) < 65536:
            raise fail("ansible_ssh_common_args/ansible_ssh_extra_args", f"-p {ssh['port']}",
                       "a port number (1-65535)")
        port = int(ssh["port"])

    key_files = [os.path.expanduser(str(k)) for k in ssh.get("identity", [])]
    for key in ("ansible_ssh_private_key_file", "ansible_private_key_file"):
        value = text(key)
        if value:
            key_files.insert(0, os.path.expanduser(value))
            break

    strict = flag("ansible_ssh_host_key_checking",
                  default=flag("ansible_host_key_checking", default=True))
    if ssh.get("strict") is not None:
        strict = bool(ssh["strict"])

    become = flag("ansible_become")
    method = text("ansible_become_method") or "sudo"
    if become and method not in ("sudo", "ansible.builtin.sudo"):
        raise InventoryError(f"{name}: ansible_become_method={method!r} is not supported (sudo)")

    groups = tuple(str(g) for g in hostvars.get("group_names", ()))
    return HostSpec(
        name=name,
        address=text("ansible_host", "ansible_ssh_host") or name,
        connection=kind,  # type: ignore[arg-type]
        port=port,
        user=text("ansible_user", "ansible_ssh_user") or ssh.get("user"),
        key_files=tuple(dict.fromkeys(key_files)),
        proxy_jump=ssh.get("jump"),
        known_hosts_files=tuple(ssh.get("known_hosts", [])),
        strict_host_key_checking=strict,
        become=become,
        become_user=text("ansible_become_user") if become else None,
        groups=groups,
        expect=Expectations(**{v.field: value for v in desired.VARS
                               if (value := h.desired(v)) is not None}),
    )


def _workspaces(value: Any, pinned: str | None) -> dict[str, str | None] | None:
    """pytorch_workspaces -> {name: the digest it should run}, present workspaces only
    (only name, state and image_digest are read: never the tokens)."""
    if not isinstance(value, list):
        return None
    found: dict[str, str | None] = {}
    for item in value:
        if isinstance(item, Mapping) and item.get("name") and item.get("state") != "absent":
            found[str(item["name"])] = str(item.get("image_digest") or pinned or "") or None
    return found


def _parse_ssh_args(args: Sequence[str]) -> dict[str, Any]:
    """The OpenSSH options we honour from ansible_ssh_common_args / ansible_ssh_extra_args.

    As in ssh(1), the first value given for an option wins (`-o StrictHostKeyChecking=yes -o
    StrictHostKeyChecking=no` stays strict); IdentityFile is the one option that adds up.
    """
    found: dict[str, Any] = {}
    seen: set[str] = set()

    def option(text: str) -> None:
        key, _, value = text.replace("=", " ", 1).partition(" ")
        key, value = key.strip().lower(), value.strip()
        if key != "identityfile":
            if key in seen:
                return
            seen.add(key)
        if key == "proxyjump" and value.lower() != "none":
            found.setdefault("jump", value)
        elif key == "proxycommand":
            jump = _jump_from_proxy_command(value)
            if jump:
                found.setdefault("jump", jump)
        elif key in ("userknownhostsfile", "globalknownhostsfile"):
            found.setdefault("known_hosts", []).extend(
                os.path.expanduser(p) for p in value.split())
        elif key == "stricthostkeychecking":
            found.setdefault("strict", value.lower() not in ("no", "off", "false"))
        elif key == "user":
            found.setdefault("user", value)
        elif key == "port":
            found.setdefault("port", value)
        elif key == "identityfile":
            found.setdefault("identity", []).append(value)

    flags = {"-J": "jump", "-p": "port", "-l": "user"}
    i = 0
    while i < len(args):
        arg = args[i]
        head, rest = arg[:2], arg[2:]
        if head in ("-o", "-J", "-p", "-l", "-i"):
            if not rest and i + 1 < len(args):
                i += 1
                rest = args[i]
            if head == "-o":
                option(rest)
            elif head == "-i":
                found.setdefault("identity", []).append(rest)
            else:
                found.setdefault(flags[head], rest)
        i += 1
    return found


def _jump_from_proxy_command(command: str) -> str | None:
    """`ssh -W %h:%p [-p P] [-l U] [user@]jump` is the pre-ProxyJump spelling of -J."""
    try:
        words = shlex.split(command)
    except ValueError:
        return None
    if not words or os.path.basename(words[0]) != "ssh" or "-W" not in words:
        return None
    port = user = host = None
    i = 1
    while i < len(words):
        word = words[i]
        if word in ("-p", "-l", "-W", "-i", "-o", "-F"):
            value = words[i + 1] if i + 1 < len(words) else ""
            if word == "-p":
                port = value
            elif word == "-l":
                user = value
            i += 2
            continue
        if not word.startswith("-"):
            host = word
        i += 1
    if host is None:
        return None
    if user and "@" not in host:
        host = f"{user}@{host}"
    return f"{host}:{port}" if port else host


def spec_from_vars(name: str, variables: Mapping[str, Any]) -> HostSpec:
    """A HostSpec from plain variables (no templating), read exactly as hostvars are: used by
    node-local mode, whose expectations file the roles render from the same variables."""
    return _spec(name, variables, lambda value: value)


def load_expectations(path: Path | None) -> dict[str, Any]:
    """The variables in an expectations file (a YAML or JSON mapping of desired-state variables,
    gpufleet.inventory.desired.NAMES); {} without a file."""
    if path is None:
        return {}
    import yaml  # type: ignore[import-untyped]  # noqa: PLC0415  # ansible dependency


    try:
        data = read_parsed(path, yaml.safe_load, "YAML", (yaml.YAMLError,))
    except FileError as exc:
        raise ExpectError(str(exc)) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ExpectError(f"{path} must be a mapping of inventory variables, not "
                          f"{type(data).__name__}")
    unknown = sorted(str(k) for k in data if k not in desired.NAMES)
    if unknown:
        raise ExpectError(f"{path}: unknown variable(s) {', '.join(unknown)} (known: "
                          f"{', '.join(sorted(desired.NAMES))})")
    return {str(k): v for k, v in data.items()}


def node_spec(name: str, variables: Mapping[str, Any]) -> HostSpec:
    """This node as a local host with the expectations of `variables` (read as hostvars are
    read, so a value means the same in both places): node-check, the Slurm smoke, the
    Ansible/AWX path."""
    try:
        return spec_from_vars(name, {**variables, "ansible_connection": "local"})
    except InventoryError as exc:
        raise ExpectError(str(exc)) from exc
