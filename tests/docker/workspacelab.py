"""The pytorch_workspace role against a real engine: a bridge lab (dockerlib, `bridge=True`:
`-p 127.0.0.1:PORT:…` served by docker-proxy), the workspace image (build_workspace_image.py)
in its registry, and real ansible-playbook runs with this machine as the Docker host
(connection local, DOCKER_HOST = the lab's socket).

`WorkspaceWorld.play(name, **vars)` runs playbooks/site.yml --tags pytorch_workspace; `cli()` runs
the real gpufleet CLI on the same inventory; the SSH key, tokens and ports live here. Ports are
in 28000-28999 on 127.0.0.1; config dirs and the inventory under a per-run temp dir.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import ansible_runner
import build_test_image
import build_workspace_image
import dockerlib
from dockerlib import DockerLab
from imagetarget import REPO, VENV_BIN

from harness.plays import PlayResult, run_play
from paths import COLLECTION

HOST = "ws-host"
BIND = "127.0.0.1"
NVIDIA_DEFAULT: dict[str, object] = {"runtimes": {"nvidia": {"path": "runc"}},
                                     "default-runtime": "nvidia"}


@dataclass
class WorkspaceWorld:
    lab: DockerLab
    ref: str  # repository:tag of the workspace image in the lab's registry
    digest: str
    workdir: Path
    key: Path
    tokens: dict[str, str] = field(default_factory=dict)
    uids: dict[str, int] = field(default_factory=dict)
    plays: int = 0

    @property
    def repo(self) -> str:
        return self.ref.rsplit(":", 1)[0]

    @property
    def inventory(self) -> Path:
        return self.workdir / "inventory.json"

    @property
    def config_dir(self) -> Path:
        return self.workdir / "etc-workspaces"

    def pubkey(self) -> str:
        return self.key.with_suffix(".pub").read_text().strip()

    def workspace(self, name: str, jupyter: int, ssh: int, **extra: object) -> dict[str, object]:
        token = self.tokens.setdefault(name, secrets.token_hex(24))
        uid = self.uids.setdefault(name, 2001 + len(self.uids))
        return {"name": name, "user": f"u{name}", "uid": uid,
                "bind_address": BIND, "jupyter_port": jupyter, "jupyter_token": token,
                "ssh_port": ssh, "ssh_authorized_keys": [self.pubkey()], "memory": "512m",
                "cpus": "1.5", **extra}  # fmt: skip

    def write_inventory(self, workspaces: list[dict[str, object]] | None = None) -> None:
        """The inventory (plays pass their workspaces with -e, which wins over it)."""
        extra = {"pytorch_workspaces": workspaces} if workspaces is not None else {}
        self.inventory.write_text(json.dumps({"all": {"hosts": {HOST: {**extra,
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "pytorch_image": self.ref,
            "pytorch_image_digest": self.digest,
            "pytorch_workspace_config_dir": str(self.config_dir),
            "container_runtime_engine": "docker",
        }}}}, indent=2))  # fmt: skip

    def env(self) -> dict[str, str]:
        return {**self.lab.env, "ANSIBLE_NOCOLOR": "1", "ANSIBLE_FORCE_COLOR": "0",
                "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}",
                "ANSIBLE_CONFIG": str(REPO / "ansible.cfg")}  # fmt: skip

    def play(self, name: str, workspaces: list[dict[str, object]], *, verbose: int = 0,
             **extra: object) -> PlayResult:
        """site.yml --tags pytorch_workspace on this machine with these workspaces."""
        self.plays += 1
        argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(self.inventory),
                str(COLLECTION / "playbooks/site.yml"), "--tags", "pytorch_workspace",
                *(["-" + "v" * verbose] if verbose else [])]
        return run_play(argv, logdir=self.workdir, name=f"{self.plays:02d}-{name}",
                        default_host=HOST, cwd=REPO, env=self.env(), timeout=600,
                        extra_vars={"pytorch_workspaces": workspaces, **extra})

    def runner_events(self, name: str, workspaces: list[dict[str, object]],
                      **extra: object) -> list[dict[str, object]]:
        """The same play through ansible-runner (what AWX runs) at -vvv: its job event files,
        as AWX stores them (artifacts/ID/job_events/*.json), parsed."""
        self.plays += 1
        pdd = self.workdir / f"runner-{self.plays:02d}-{name}"
        pdd.mkdir()
        # ansible_runner.run() replaces SIGINT's and SIGTERM's handlers of the whole process with
        # its own (utils.signal_handler: they only set an event) and never puts them back: every
        # later Ctrl-C test on this pytest worker then got no KeyboardInterrupt (CI: the run
        # "ended before the interrupt"). The handlers are this test process's, so they go back.
        saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            ansible_runner.run(
                private_data_dir=str(pdd), project_dir=str(REPO), ident=name,
                playbook=str(COLLECTION / "playbooks/site.yml"), inventory=str(self.inventory),
                cmdline="--tags pytorch_workspace", verbosity=3, quiet=True,
                envvars=self.env(), extravars={"pytorch_workspaces": workspaces, **extra})
        finally:
            for sig, handler in saved.items():
                signal.signal(sig, handler)
        events = sorted((pdd / "artifacts" / name / "job_events").glob("*.json"))
        assert events, f"ansible-runner wrote no job events under {pdd}"
        return [json.loads(e.read_text()) for e in events]

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {k: v for k, v in self.lab.env.items() if not k.startswith("SSH_")}
        env["PYTHONPATH"] = str(REPO / "agent")
        return subprocess.run([sys.executable, "-m", "gpufleet", *args, "-i", str(self.inventory)],
                              cwd=self.workdir, env=env, capture_output=True, text=True,
                              timeout=300, check=False)  # fmt: skip

    def push_variant(self, tag: str) -> str:
        """The workspace image plus a label, pushed as repo:tag (same layers, another digest)."""
        target = f"{self.repo}:{tag}"
        dockerfile = f"FROM {self.repo}@{self.digest}\nLABEL {dockerlib.LABEL}.variant={tag}\n"
        self.lab.docker("build", "-q", "-t", target, "-", input=dockerfile)
        self.lab.docker("push", target)
        digests = json.loads(self.lab.docker("image", "inspect", "--format",
                                             "{{json .RepoDigests}}", target).stdout)  # fmt: skip
        return str(digests[0]).split("@", 1)[1]

    def inspect(self, container: str) -> dict[str, object]:
        data = json.loads(self.lab.docker("inspect", container).stdout)
        assert isinstance(data, list) and len(data) == 1
        return dict(data[0])

    def ssh(self, port: int, user: str, *remote: str,
            options: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:  # fmt: skip
        return subprocess.run(
            ["ssh", "-F", "none", "-p", str(port), "-i", str(self.key), "-o", "BatchMode=yes",
             "-o", "IdentitiesOnly=yes", "-o", "StrictHostKeyChecking=yes",
             "-o", f"UserKnownHostsFile={self.workdir / 'known_hosts'}",
             "-o", "ConnectTimeout=10", *options, f"{user}@{BIND}", *remote],
            # ssh sets its stdin non-blocking and, leaving through fatal() (a refused forward),
            # does not restore it: every later ansible-playbook would refuse to run
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip

    def trust_host_key(self, name: str, port: int) -> None:
        """known_hosts from the workspace's host key, as the role made it in the host's config
        dir (read from the file, not the net)."""
        key = (self.config_dir / name / "ssh_host_ed25519_key.pub").read_text()
        kind, blob = key.split()[:2]
        with (self.workdir / "known_hosts").open("a") as f:
            f.write(f"[{BIND}]:{port} {kind} {blob}\n")


def fake_nvidia_smi(path: Path) -> tuple[str, ...]:
    """A stand-in nvidia-smi answering the role's one query (index, uuid) from the real 2xH200
    capture (tests/fixtures/h200x2-2026-11-30/query-gpu.csv); anything else exits 2. The
    GPUs' UUIDs."""
    capture = REPO / "tests/fixtures/h200x2-2026-11-30/query-gpu.csv"
    rows = [[c.strip() for c in line.split(",")] for line in capture.read_text().splitlines()[1:]
            if line.strip()]  # fmt: skip
    lines = "\n".join(f"{r[0]}, {r[2]}" for r in rows)
    query = "--query-gpu=index,uuid --format=csv,noheader"
    path.write_text("#!/bin/sh\n"
                    f'if [ "$*" = "{query}" ]; then\n'
                    f"    cat <<'EOF'\n{lines}\nEOF\n    exit 0\nfi\n"
                    f'echo "fake nvidia-smi: only {query}" >&2\n'
                    "exit 2\n")  # fmt: skip
    path.chmod(0o755)
    return tuple(r[2] for r in rows)


def fake_nvidia_ctk(path: Path, uuids: tuple[str, ...]) -> None:
    """A stand-in `nvidia-ctk` answering `cdi list` for a spec made with
    `--device-name-strategy=index,uuid`: one fully qualified name per line on stdout, the count
    on the log (NVIDIA/nvidia-container-toolkit@202b78d cmd/nvidia-ctk/cdi/list/list.go; the
    names per GPU and "all": inferred from that strategy's documentation)."""
    names = ["nvidia.com/gpu=all"] + [f"nvidia.com/gpu={n}" for i, u in enumerate(uuids)
                                      for n in (str(i), u)]  # fmt: skip
    path.write_text("#!/bin/sh\n"
                    'if [ "$*" = "cdi list" ]; then\n'
                    f'    echo "level=info msg=\\"Found {len(names)} CDI devices\\"" >&2\n'
                    f"    cat <<'EOF'\n{chr(10).join(names)}\nEOF\n    exit 0\nfi\n"
                    'echo "fake nvidia-ctk: only cdi list" >&2\nexit 2\n')  # fmt: skip
    path.chmod(0o755)


def http(port: int, path: str, token: str | None = None) -> tuple[int, dict[str, str]]:
    """(status, headers) of GET http://127.0.0.1:PORT/PATH, redirects not followed."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(NoRedirect)
    req = urllib.request.Request(f"http://{BIND}:{port}{path}")
    if token is not None:
        req.add_header("Authorization", f"token {token}")
    try:
        with opener.open(req, timeout=10) as r:
            return r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers)


def wait_http(port: int, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            http(port, "/api/status")
            return
        except (OSError, urllib.error.URLError):
            time.sleep(0.5)
    raise AssertionError(f"nothing answered HTTP on {BIND}:{port} within {timeout}s")


def wait_ssh_banner(port: int, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection((BIND, port), 2) as s:
            s.settimeout(3)
            if s.recv(64).startswith(b"SSH-2.0-"):
                return
        time.sleep(0.5)
    raise AssertionError(f"no SSH banner on {BIND}:{port} within {timeout}s")


@contextlib.contextmanager
def workspace_world() -> Iterator[WorkspaceWorld]:
    t0 = time.monotonic()
    archive = build_test_image.build()
    workdir = Path(f"/var/tmp/gpufleet-workspaces-{os.getpid()}")
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    try:
        # "nvidia" as the default runtime, as nvidia_container_toolkit_default_runtime makes it;
        # here an alias of runc (no GPUs on this machine): what the engine records (Runtime)
        # is real, the GPU injection NVIDIA's runtime would do is not.
        with dockerlib.make_lab(bridge=True, daemon_json=NVIDIA_DEFAULT) as lab:
            lab.provide_test_image(archive)
            ref, digest = build_workspace_image.provide_workspace_image(lab, archive)
            key = workdir / "id_ed25519"
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ws-test",
                            "-f", str(key)], check=True)  # fmt: skip
            world = WorkspaceWorld(lab, ref, digest, workdir, key)
            world.write_inventory()
            print(f"\n[workspace_world] ready in {time.monotonic() - t0:.1f}s: {ref}@{digest}",
                  file=sys.stderr)
            yield world
    finally:
        keep = Path("/var/tmp/gpufleet-workspace-test-logs")
        shutil.rmtree(keep, ignore_errors=True)
        with contextlib.suppress(OSError):
            shutil.copytree(workdir, keep, ignore=shutil.ignore_patterns(
                "*.vars.json", "extravars", "id_ed25519", "etc-workspaces"))
        shutil.rmtree(workdir, ignore_errors=True)
