"""The pytorch_workspace role's plan: validation, refusals and the docker argv (pure Python).

`pytorch_workspace_plan` turns the inventory's `pytorch_workspaces` and the host's GPU list into
either refusals (every one found, none of them containing a token) or, per workspace, the
container name, the `docker create` argv (a list, never a shell string) and a config hash (the
container's `gpufleet.workspace.config` label: the idempotence key). The files each container
mounts (the Jupyter token among them) are kept apart, in `files` keyed by workspace name, so
that the role's loops run over items without a secret in them (Ansible prints a loop item on
failure, at -v, and in ansible-runner/AWX job events, whatever `loop_control.label` says).
`pytorch_workspace_actions` compares the plan with `docker ps` of the host.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import shlex
from typing import Any

LABEL = "gpufleet.workspace"
MOUNT = "/etc/gpufleet-workspace"  # the workspace's config dir inside the container
TLS_MOUNT = "/etc/gpufleet-workspace-tls"  # the certificate and key, when Jupyter serves TLS
PRIVATE = "/run/gpufleet-workspace"  # a tmpfs of the container: the user's copy of the secrets
HOST_KEY = "ssh_host_ed25519_key"  # made once on the host by the role, kept across recreates
# What start.sh (root) and sshd need once every other capability is dropped: useradd/usermod and
# install -o (CHOWN, FOWNER), setpriv and sshd's privilege separation (SETUID, SETGID, SYS_CHROOT,
# KILL to signal its unprivileged children) and sshd's login records (AUDIT_WRITE). No
# DAC_OVERRIDE: root in the container cannot read the tenant's volumes past their modes.
CAPS = ("CHOWN", "FOWNER", "SETUID", "SETGID", "SYS_CHROOT", "KILL", "AUDIT_WRITE")
JUPYTER_INSIDE = 8888
SSH_INSIDE = 2222
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_USER = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_MEMORY = re.compile(r"^[1-9][0-9]*[bkmgBKMG]?$")
_UUID = re.compile(r"^(GPU|MIG)-[0-9A-Fa-f-]{8,}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_VOLUME = re.compile(r"^(/[^:,\s]*|[A-Za-z0-9][A-Za-z0-9_.-]*):(/[^:,\s]*)(:(ro|rw))?$")
_KEY = re.compile(r"^(ssh-(ed25519|rsa)|ecdsa-sha2-nistp(256|384|521)|sk-\S+) [A-Za-z0-9+/=]+( .*)?$")
_ANY = {"0.0.0.0", "::"}
# NVIDIA's Container Toolkit, legacy mode: "void" (like "none" or empty) gives no GPU even where
# the image says NVIDIA_VISIBLE_DEVICES=all and nvidia is the default runtime (NVIDIA/
# cloud-native-docs container-toolkit/docker-specialized.md, "GPU Enumeration").
NO_GPU_ENV = "NVIDIA_VISIBLE_DEVICES=void"
CDI_KIND = "nvidia.com/gpu"  # the toolkit's CDI vendor/class (nvidia-ctk cdi generate)


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def _gpu_id(raw: Any, host_gpus: list[dict[str, str]], where: str, errors: list[str]) -> str | None:
    """A workspace's GPU entry -> the GPU's UUID (or index when the host gave no UUIDs)."""
    text = str(raw).strip()
    indices = [g["index"] for g in host_gpus]
    if text.isdigit():
        match = [g for g in host_gpus if g["index"] == str(int(text))]
        if not match:
            have = f"{len(host_gpus)} GPU(s), indices {', '.join(indices)}" if host_gpus else "no GPUs"
            errors.append(f"{where}: GPU {text} does not exist on this host (it has {have})")
            return None
        return match[0].get("uuid") or match[0]["index"]
    if _UUID.match(text):
        if not any(g.get("uuid") == text for g in host_gpus):
            errors.append(f"{where}: GPU {text} is not on this host")
            return None
        return text
    errors.append(f"{where}: GPU {text!r} is neither an index nor a GPU-/MIG- UUID")
    return None


def _gpu_args(ids: list[str], cdi: set[str]) -> list[str]:
    """The GPUs by UUID (an index names another GPU once one drops off the bus), or none at all:
    without a device request the nvidia runtime would still honour the image's
    NVIDIA_VISIBLE_DEVICES=all, so a GPU-less workspace says void. Where the toolkit's CDI spec
    names every one of them by UUID (`nvidia-ctk cdi list`), CDI devices: a legacy `--gpus`
    container loses its GPUs on `systemctl daemon-reload` under the systemd cgroup driver
    (NVIDIA/cloud-native-docs container-toolkit/troubleshooting.md)."""
    if not ids:
        return ["--env", NO_GPU_ENV]
    names = [f"{CDI_KIND}={i}" for i in ids]
    if all(n in cdi for n in names):
        return [a for n in names for a in ("--device", n)]
    # The docker CLI reads --gpus as CSV: the quotes keep "device=A,B" one field.
    return ["--gpus", '"device=' + ",".join(ids) + '"']


def _hardening(opts: dict[str, Any], cpus: str, shm: str) -> list[str]:
    """Limits and privileges every workspace gets (each default: roles/pytorch_workspace/README)."""
    argv = ["--security-opt", "no-new-privileges", "--cap-drop", "ALL"]
    for cap in CAPS:
        argv += ["--cap-add", cap]
    if opts.get("pids_limit"):
        argv += ["--pids-limit", str(opts["pids_limit"])]
    if cpus:
        argv += ["--cpus", cpus]
    if shm:
        # PyTorch's DataLoader workers share tensors through /dev/shm (64 MB by default); the
        # stack ulimit is the one NVIDIA's PyTorch container documentation asks for. Its
        # memlock=-1 is left out: runc sets rlimits after dropping capabilities, and raising
        # memlock needs SYS_RESOURCE ("error setting rlimit type 8: operation not permitted",
        # measured on this lab's engine with --cap-drop ALL).
        argv += ["--shm-size", shm, "--ulimit", "stack=67108864"]
    return argv


def _start_script(ws: dict[str, Any], opts: dict[str, Any]) -> str:
    """Runs as root in the container (capabilities: CAPS) to make the user, hand it its secrets
    and start sshd; then Jupyter runs as the user."""
    tls = ws["tls"]
    return "\n".join([
        "#!/bin/sh",
        f"# gpufleet workspace {ws['name']}: made by the pytorch_workspace role; sshd and Jupyter",
        "# come from the image. Runs as root only to add the user, copy its secrets, start sshd.",
        "set -eu",
        f"cfg={MOUNT}",
        f"run={PRIVATE}",
        f"user={shlex.quote(ws['user'])}",
        f"uid={ws['uid']}",
        # An image may hold the uid already (ubuntu:24.04 has ubuntu:x:1000): that account
        # becomes the workspace user, with a usable ('*', not locked '!') password field. Its
        # home stays where it is: moving the user's directory needs DAC_OVERRIDE.
        'old=$(getent passwd "$uid" | cut -d: -f1) || old=',
        'if [ -n "$old" ] && [ "$old" != "$user" ]; then',
        '    usermod -l "$user" -p "*" -s /bin/bash "$old"',
        '    if [ "$(getent group "$old" | cut -d: -f3)" = "$uid" ]; then groupmod -n "$user" "$old"; fi',
        "fi",
        'getent group "$uid" >/dev/null || groupadd -g "$uid" "$user"',
        'getent passwd "$user" >/dev/null || useradd -m -u "$uid" -g "$uid" -s /bin/bash -p "*" "$user"',
        'home=$(getent passwd "$user" | cut -d: -f6)',
        # The host keeps the token (and TLS key) root:root 0600; the user reads its own copy.
        # The dir goes to the user last: without DAC_OVERRIDE root cannot enter it after.
        'mkdir -p "$run"',
        'install -m 0600 -o "$uid" -g "$uid" "$cfg/jupyter_server_config.json" "$run/"',
        *([f'install -m 0600 -o "$uid" -g "$uid" {TLS_MOUNT}/tls.crt {TLS_MOUNT}/tls.key "$run/"']
          if tls else []),
        'chown "$uid:$uid" "$run" && chmod 0700 "$run"',
        "mkdir -p /run/sshd",
        f'{shlex.quote(opts["sshd_command"])} -f "$cfg/sshd_config"',
        'cd "$home"',
        'exec setpriv --reuid="$uid" --regid="$uid" --init-groups env HOME="$home" USER="$user" '
        'LOGNAME="$user" SHELL=/bin/bash '
        f'{shlex.quote(opts["jupyter_command"])} --config="$run/jupyter_server_config.json"',
        "",
    ])


def _files(ws: dict[str, Any], opts: dict[str, Any]) -> dict[str, str]:
    user = ws["user"]
    # Ansible may hand the flag over as text ("False" is not false).
    forwarding = "yes" if str(opts.get("ssh_forwarding")).lower() in ("true", "yes", "1") else "no"
    sshd = "\n".join([
        f"# gpufleet workspace {ws['name']}: keys only, no passwords, no root",
        f"Port {SSH_INSIDE}",
        f"HostKey {MOUNT}/{HOST_KEY}",
        "PubkeyAuthentication yes",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "PermitEmptyPasswords no",
        "PermitRootLogin no",
        "UsePAM no",
        f"AllowUsers {user}",
        f"AuthorizedKeysFile {MOUNT}/authorized_keys",
        # Forwarding would reach the host's loopback services and the cloud metadata address
        # from inside the workspace's network (pytorch_workspace_ssh_forwarding turns it on).
        f"AllowTcpForwarding {forwarding}",
        f"AllowAgentForwarding {forwarding}",
        f"AllowStreamLocalForwarding {forwarding}",
        f"PermitTunnel {forwarding}",
        f"X11Forwarding {forwarding}",
        "PidFile /run/sshd.pid",
        "Subsystem sftp internal-sftp",
        "",
    ])
    server: dict[str, Any] = {
        "ip": "0.0.0.0", "port": JUPYTER_INSIDE, "port_retries": 0, "open_browser": False,
        "token": ws["jupyter_token"], "password": "", "allow_root": False}
    if ws["tls"]:
        server.update(certfile=f"{PRIVATE}/tls.crt", keyfile=f"{PRIVATE}/tls.key")
    jupyter = json.dumps({"ServerApp": server}, indent=2, sort_keys=True) + "\n"
    return {"start.sh": _start_script(ws, opts), "sshd_config": sshd,
            "authorized_keys": "".join(k.strip() + "\n" for k in ws["ssh_authorized_keys"]),
            "jupyter_server_config.json": jupyter}


def _tls(raw: dict[str, Any], opts: dict[str, Any], bind: str, where: str,
         errors: list[str]) -> tuple[str, str] | None:
    """(certificate, key) host paths, or None for plain HTTP (refused beyond loopback)."""
    cert = str(raw.get("tls_certfile") or opts.get("tls_certfile") or "")
    key = str(raw.get("tls_keyfile") or opts.get("tls_keyfile") or "")
    if bool(cert) != bool(key):
        errors.append(f"{where}: tls_certfile and tls_keyfile go together (one is empty)")
        return None
    for path in (cert, key):
        if path and not re.match(r"^/[^:,\s]*$", path):
            errors.append(f"{where}: {path!r} is not an absolute host path")
            return None
    try:
        loopback = ipaddress.ip_address(bind).is_loopback
    except ValueError:
        return None  # refused already
    if not cert and not loopback:
        errors.append(f"{where}: bind_address {bind} publishes Jupyter beyond loopback over "
                      "plain HTTP, its token readable on the network; give a certificate "
                      "(tls_certfile and tls_keyfile, or pytorch_workspace_tls_certfile/_keyfile) "
                      "or keep 127.0.0.1 and reach it through an SSH tunnel")
    return (cert, key) if cert else None


def pytorch_workspace_plan(
    workspaces: Any, host_gpus: Any, image: str, digest: str, opts: dict[str, Any]
) -> dict[str, Any]:
    """{"errors": [...], "workspaces": [...], "files": {name: {file: text}}}; see the module
    docstring. Longer than 80 lines on purpose: one pass checks each workspace's keys in order so
    that every refusal is found in one run, and helpers would pass a dozen of its values around."""
    errors: list[str] = []
    planned: list[dict[str, Any]] = []
    secrets: dict[str, dict[str, str]] = {}
    if not isinstance(workspaces, list):
        return {"errors": ["pytorch_workspaces must be a list of workspaces"], "workspaces": [],
                "files": {}}
    gpus = []  # nvidia-smi --query-gpu=index,uuid --format=csv,noheader lines
    for line in host_gpus or []:
        index, _comma, uuid = str(line).partition(",")
        if index.strip().isdigit():
            gpus.append({"index": index.strip(), "uuid": uuid.strip()})
    if any(isinstance(w, dict) and w.get("state", "present") == "present" for w in workspaces):
        if not re.match(r"^[^@\s]+:[^:/@\s]+$", str(image or "")):
            errors.append(f"pytorch_image must be repository:tag, not {image!r}")
        if not _DIGEST.match(str(digest or "")):
            errors.append(f"pytorch_image_digest must be sha256:<64 hex>, not {digest!r}")
    repo = str(image or "").rsplit(":", 1)[0]
    # `nvidia-ctk cdi list` prints one fully qualified device name per line (NVIDIA/
    # nvidia-container-toolkit cmd/nvidia-ctk/cdi/list/list.go; its count goes to the log).
    cdi = {str(line).strip() for line in opts.get("cdi_devices") or []}
    min_token = int(opts["token_min_length"])
    names: set[str] = set()
    gpu_owner: dict[str, str] = {}
    ports: list[tuple[str, int, str]] = []
    for n, raw in enumerate(workspaces):
        if not isinstance(raw, dict):
            errors.append(f"pytorch_workspaces[{n}] must be a mapping")
            continue
        name = str(raw.get("name", ""))
        where = f"workspace {name!r}" if name else f"pytorch_workspaces[{n}]"
        unknown = sorted(set(raw) - {"name", "user", "uid", "gpus", "bind_address", "jupyter_port",
                                     "jupyter_token", "ssh_port", "ssh_authorized_keys", "volumes",
                                     "memory", "cpus", "state", "image_digest", "shm_size",
                                     "tls_certfile", "tls_keyfile"})
        if unknown:
            errors.append(f"{where}: unknown keys {', '.join(unknown)}")
        if not _NAME.match(name):
            errors.append(f"{where}: name must match {_NAME.pattern}")
        elif name in names:
            errors.append(f"{where}: name used twice")
        names.add(name)
        state = raw.get("state", "present")
        if state not in ("present", "absent"):
            errors.append(f"{where}: state must be present or absent, not {state!r}")
            continue
        container = f"{opts['container_prefix']}{name}"
        if state == "absent":
            planned.append({"name": name, "container": container, "state": "absent"})
            continue
        user = str(raw.get("user", ""))
        uid = _int(raw.get("uid"))
        if user == "root" or uid == 0:
            errors.append(f"{where}: runs as root (user {user!r}, uid {uid}); "
                          "workspaces need a non-root user and uid")
        elif not _USER.match(user):
            errors.append(f"{where}: user must be a login name matching {_USER.pattern}")
        if uid is None or not 0 < uid < 65534:
            if uid != 0:
                errors.append(f"{where}: uid must be a number from 1 to 65533")
        token = raw.get("jupyter_token")
        token = "" if token is None else str(token)
        if len(token) < min_token:
            errors.append(f"{where}: jupyter_token is {len(token)} characters, shorter than "
                          f"the minimum {min_token} (pytorch_workspace_token_min_length); "
                          "generate one with `openssl rand -hex 24` and vault it")
        keys = raw.get("ssh_authorized_keys") or []
        if not isinstance(keys, list) or not keys:
            errors.append(f"{where}: ssh_authorized_keys must list at least one public key "
                          "(password login is disabled)")
            keys = []
        elif not all(isinstance(k, str) and _KEY.match(k.strip()) for k in keys):
            errors.append(f"{where}: ssh_authorized_keys holds an entry that is not an OpenSSH "
                          "public key line")
        bind = str(raw.get("bind_address") or opts["bind_address"])
        try:
            ipaddress.ip_address(bind)
        except ValueError:
            errors.append(f"{where}: bind_address {bind!r} is not an IP address")
        wport = {}
        for key, default in (("jupyter_port", None), ("ssh_port", opts["ssh_port"])):
            port = _int(default if raw.get(key) is None else raw.get(key))
            if port is None or not 0 < port < 65536:
                errors.append(f"{where}: {key} must be a port number (1-65535)")
                continue
            wport[key] = port
            for other_bind, other_port, other in ports:
                if other_port == port and (bind == other_bind or {bind, other_bind} & _ANY):
                    errors.append(f"{where}: port {port} ({key}) on {bind} is already used by "
                                  f"{other}")
            ports.append((bind, port, f"{where} ({key} on {bind})"))
        memory = str(raw.get("memory") or opts["memory"] or "")
        if not _MEMORY.match(memory):
            errors.append(f"{where}: memory must be a size like 16g (every workspace has a "
                          f"memory limit), not {memory!r}")
        cpus = opts["cpus"] if raw.get("cpus") is None else raw.get("cpus")
        cpus = "" if cpus in (None, "") else str(cpus)
        if cpus and not re.match(r"^[0-9]+(\.[0-9]+)?$", cpus):
            errors.append(f"{where}: cpus must be a number like 4 or 1.5, not {cpus!r}")
        volumes = raw.get("volumes") or []
        if not isinstance(volumes, list) or not all(
                isinstance(v, str) and _VOLUME.match(v) for v in volumes):
            errors.append(f"{where}: volumes must be a list of HOST:CONTAINER[:ro|rw] strings")
            volumes = []
        gpu_ids: list[str] = []  # canonical (UUID where the host gave one): for conflicts
        devices: list[str] = []  # as written (index or UUID): for the label only
        raw_gpus = raw.get("gpus") or []
        if not isinstance(raw_gpus, list):
            errors.append(f"{where}: gpus must be a list of indices or UUIDs")
            raw_gpus = []
        for g in raw_gpus:
            gid = _gpu_id(g, gpus, where, errors)
            if gid is None:
                continue
            if gid in gpu_owner and gpu_owner[gid] != where:
                errors.append(f"{where}: GPU {g} is also assigned to {gpu_owner[gid]}")
            gpu_owner.setdefault(gid, where)
            if gid not in gpu_ids:
                gpu_ids.append(gid)
                text = str(g).strip()
                devices.append(str(int(text)) if text.isdigit() else text)
        own_digest = str(raw.get("image_digest") or digest or "")
        if raw.get("image_digest") and not _DIGEST.match(own_digest):
            errors.append(f"{where}: image_digest must be sha256:<64 hex>")
        shm = str(raw.get("shm_size") or opts.get("shm_size") or "")
        if shm and not _MEMORY.match(shm):
            errors.append(f"{where}: shm_size must be a size like 8g, not {shm!r}")
        tls = _tls(raw, opts, bind, where, errors)
        ws = {"name": name, "user": user, "uid": uid, "jupyter_token": token,
              "ssh_authorized_keys": keys, "tls": tls}
        files = _files(ws, opts) if not errors else {}
        pinned = f"{repo}@{own_digest}"
        labels = {LABEL: name, f"{LABEL}.user": user, f"{LABEL}.uid": str(uid),
                  f"{LABEL}.gpus": ",".join(devices), f"{LABEL}.jupyter": str(JUPYTER_INSIDE),
                  f"{LABEL}.ssh": str(SSH_INSIDE), f"{LABEL}.sshd": str(opts["sshd_command"]),
                  f"{LABEL}.tls": "yes" if tls else "no"}
        argv = [opts["docker_command"], "create", "--name", container, "--hostname", name,
                "--restart", opts["restart_policy"], "--memory", memory,
                *_hardening(opts, cpus, shm), *_gpu_args(gpu_ids, cdi)]
        for key, inside in (("jupyter_port", JUPYTER_INSIDE), ("ssh_port", SSH_INSIDE)):
            if key in wport:
                host = f"[{bind}]" if ":" in bind else bind
                argv += ["-p", f"{host}:{wport[key]}:{inside}"]
        argv += ["-v", f"{opts['config_dir']}/{name}:{MOUNT}:ro",
                 "--tmpfs", f"{PRIVATE}:rw,nosuid,nodev,noexec,size=1m,mode=0700"]
        if tls:
            argv += ["-v", f"{tls[0]}:{TLS_MOUNT}/tls.crt:ro",
                     "-v", f"{tls[1]}:{TLS_MOUNT}/tls.key:ro"]
        for v in volumes:
            argv += ["-v", v]
        for k, v in labels.items():
            argv += ["--label", f"{k}={v}"]
        config = hashlib.sha256(json.dumps({"argv": argv, "image": pinned, "files": files},
                                           sort_keys=True).encode()).hexdigest()[:32]
        argv += ["--label", f"{LABEL}.config={config}",
                 "--entrypoint", "/bin/sh", pinned, f"{MOUNT}/start.sh"]
        secrets[name] = files
        planned.append({"name": name, "container": container, "state": "present",
                        "image": pinned, "config": config, "argv": argv,
                        "uid": uid, "gpus": gpu_ids})
    if errors:
        return {"errors": errors, "workspaces": [], "files": {}}
    return {"errors": [], "workspaces": planned, "files": secrets}


def pytorch_workspace_actions(plan: dict[str, Any], ps_lines: list[str]) -> dict[str, Any]:
    """What to do, from `docker ps -a` lines NAME|WORKSPACE|CONFIG|STATE (workspace containers)."""
    have = {}
    for line in ps_lines:
        parts = line.strip().split("|")
        if len(parts) == 4:
            have[parts[0].lstrip("/")] = {"config": parts[2], "state": parts[3]}
    remove, create, start = [], [], []
    for ws in plan["workspaces"]:
        cur = have.get(ws["container"])
        if ws["state"] == "absent":
            if cur is not None:
                remove.append(ws["container"])
            continue
        if cur is not None and cur["config"] != ws["config"]:
            remove.append(ws["container"])
            cur = None
        if cur is None:
            create.append(ws["name"])
        elif cur["state"] != "running":
            start.append(ws["container"])
    return {"remove": remove, "create": create, "start": start}


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"pytorch_workspace_plan": pytorch_workspace_plan,
                "pytorch_workspace_actions": pytorch_workspace_actions}
