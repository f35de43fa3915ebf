"""Local rpm repositories that reproduce NVIDIA's cuda-rhel9-x86_64 repository (driver subpackages
at one epoch:version-release, meta-packages, module streams <branch>-open / <branch>-dkms), EPEL 9
and Rocky 9's BaseOS/AppStream/Extras/CRB from tests/ansible/graphs/rpm/rocky9.toml: tiny packages
built with rpmbuild, signed with rpmsign (the run's key), indexed with createrepo_c; module metadata
added with modifyrepo_c (a modulemd v2 document per stream).
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pkggraph
import roletarget as tg
import tomllib
import yaml

FACTS = ("name", "version", "arch", "requires", "provides", "obsoletes", "repo", "files",
         "scripts")
# Directory of each repository under the mirror root, shaped like the real URLs.
REPO_DIRS = {
    "cuda": "cuda/rhel9/x86_64",
    "epel": "epel/9/Everything/x86_64",
    "baseos": "rocky/9/BaseOS/x86_64/os",
    "appstream": "rocky/9/AppStream/x86_64/os",
    "extras": "rocky/9/extras/x86_64/os",
    "crb": "rocky/9/CRB/x86_64/os",
    "toolkit": "libnvidia-container/stable/rpm/x86_64",
    "docker": "docker/linux/rhel/9/x86_64/stable",
}
STREAMS = {"open": "{b}-open", "dkms": "{b}-dkms"}


def repo_dirs(major: int) -> dict[str, str]:
    """REPO_DIRS for EL `major`: Rocky 8 calls CRB PowerTools (repo id powertools)."""
    dirs = {k: v.replace("rhel9", f"rhel{major}").replace("/9/", f"/{major}/")
            for k, v in REPO_DIRS.items()}
    if major == 8:
        dirs["crb"] = dirs["crb"].replace("/CRB/", "/PowerTools/")
    return dirs


@dataclass(frozen=True)
class Rpm:
    repo: str
    name: str
    epoch: int
    version: str
    release: str
    arch: str
    stream: str = ""  # module stream this package is an artifact of ("" = not modular)
    requires: tuple[str, ...] = ()
    provides: tuple[str, ...] = ()
    obsoletes: tuple[str, ...] = ()
    files: tuple[tuple[str, str], ...] = ()
    # scriptlets by section ("post", "preun"), run by the target's real rpm in its real order
    scripts: tuple[tuple[str, str], ...] = ()

    @property
    def nevra(self) -> str:
        return f"{self.name}-{self.epoch}:{self.version}-{self.release}.{self.arch}"


def load(name: str = "rocky9") -> dict[str, Any]:
    return tomllib.loads((pkggraph.GRAPHS / "rpm" / f"{name}.toml").read_text())


def unsourced(graph: dict[str, Any]) -> list[str]:
    """Every stated fact without a source, and every source of none of the accepted forms."""
    sources: dict[str, str] = graph["sources"]
    bad = [f"[sources] {k}: {v[:60]!r} is not a URL, repo@commit:path, capture: or inferred:"
           for k, v in sources.items() if not pkggraph.SOURCE_FORMS.match(v)]
    for spec in [*graph["package"], *graph["other"]]:
        cite: dict[str, str] = spec.get("cite", {})
        for fact in sorted({"name", "version", "arch", "repo"} | {f for f in FACTS if f in spec}):
            if cite.get(fact) not in sources:
                bad.append(f"{spec['name']}: {fact} has no source (cite.{fact}={cite.get(fact)!r})")
    return bad


def sourced(graph: dict[str, Any], name: str, *facts: str) -> bool:
    """Whether the named facts of package `name` rest on more than an inference."""
    for spec in [*graph["package"], *graph["other"]]:
        if spec["name"] == name:
            cite = spec["cite"]
            return all(not graph["sources"][cite[f]].startswith("inferred:") for f in facts)
    raise KeyError(f"{name} is not in the graph")


def expand(graph: dict[str, Any], major: int = 9) -> list[Rpm]:
    """Every package of the graph; release tags and EL numbers for EL `major`."""
    el = f"el{major}"
    out: list[Rpm] = []
    for spec in graph["package"]:
        for versions in graph["driver"].values():
            for v in versions:
                def fill(t: str, v: str = v) -> str:
                    return t.replace("{v}", v)

                stream = spec.get("stream", "both")
                out.append(Rpm(
                    repo=spec["repo"], name=spec["name"], epoch=spec["epoch"], version=v,
                    release=f"1.{el}", arch=spec["arch"],
                    stream="" if stream == "none" else stream.replace("both", "open dkms"),
                    requires=tuple(fill(r) for r in spec.get("requires", [])),
                    provides=tuple(fill(p) for p in spec.get("provides", [])),
                    files=tuple((fill(k), fill(c)) for k, c in spec.get("files", {}).items()),
                    scripts=tuple((k, fill(c)) for k, c in spec.get("scripts", {}).items()),
                ))
    for spec in graph["other"]:
        version, release = spec["version"].split("-", 1)
        if spec["name"] == "rocky-release":
            version = {8: "8.10", 9: version}[major]
        out.append(Rpm(repo=spec["repo"], name=spec["name"], epoch=0,
                       version=version.replace("9", str(major)) if spec["name"] == "epel-release"
                       else version,
                       release=release.replace("el9", el), arch=spec["arch"],
                       requires=tuple(spec.get("requires", [])),
                       provides=tuple(p.replace("= 9.6", f"= {version}").replace(
                           "(releasever) = 9", f"(releasever) = {major}")
                           for p in spec.get("provides", [])),
                       obsoletes=tuple(spec.get("obsoletes", [])),
                       files=tuple(spec.get("files", {}).items())))
    return out


def _spec(rpm: Rpm, base: str, major: int) -> str:
    lines = [
        f"Name: {rpm.name}",
        f"Version: {rpm.version}",
        f"Release: {rpm.release}",
        "Summary: gpufleet test stand-in",
        "License: none",
        f"BuildArch: {rpm.arch}",
        # Only the graph's requirements: no /bin/sh from a script's shebang.
        "AutoReqProv: no",
    ]
    if rpm.epoch:
        lines.append(f"Epoch: {rpm.epoch}")
    lines += [f"Requires: {r}" for r in rpm.requires]
    lines += [f"Provides: {p}" for p in rpm.provides]
    lines += [f"Obsoletes: {o}" for o in rpm.obsoletes]
    lines += ["%description", "Package graph only; see tests/ansible/graphs/rpm/rocky9.toml.",
              "%install"]
    for rel, content in rpm.files:
        path = f"%{{buildroot}}/{rel}"
        body = content.replace("@BASE@", base).replace("/epel/9/", f"/epel/{major}/").replace(
            "Linux 9", f"Linux {major}")
        if body == "@NVIDIA_CTK@":
            ctk = (Path(__file__).resolve().parent / "standin" / "nvidia-ctk").read_text()
            body = ctk.replace("@VERSION@", rpm.version)
        elif body == "@DKMS@":
            body = (Path(__file__).resolve().parent / "standin" / "dkms").read_text()
        elif body == "@MODULE@":
            # What DKMS builds from the source: an ELF object whose .modinfo names the version
            # (modinfo reads only that section), made here with objcopy as the rpm is built.
            info = f"version={rpm.version}\\0license=NVIDIA\\0name=nvidia\\0"
            lines += [f"mkdir -p $(dirname {path})", f"printf '{info}' > {path}.modinfo",
                      "objcopy -I binary -O elf64-x86-64 --rename-section .data=.modinfo "
                      f"{path}.modinfo {path}", f"rm {path}.modinfo"]
            continue
        lines += [f"mkdir -p $(dirname {path})", f"cat > {path} <<'GPUFLEET_EOF'",
                  body.rstrip("\n"), "GPUFLEET_EOF"]
        if rel.startswith(("usr/bin/", "usr/sbin/")):
            lines.append(f"chmod 0755 {path}")
    for section, body in rpm.scripts:
        lines += [f"%{section}", body.rstrip("\n")]
    lines.append("%files")
    lines += [f"/{rel}" for rel, _ in rpm.files]
    return "\n".join(lines) + "\n"


def _modulemd(rpms: list[Rpm]) -> str:
    """One modulemd v2 document per stream (nvidia-driver:<branch>-open / -dkms), listing the
    artifacts of that branch as NEVRAs; packages listed there are hidden unless the stream is on."""
    docs = []
    for branch in sorted({r.version.split(".")[0] for r in rpms if r.stream}):
        for flavor, template in STREAMS.items():
            arts = sorted(r.nevra for r in rpms
                          if flavor in r.stream.split() and r.version.split(".")[0] == branch)
            docs.append({
                "document": "modulemd", "version": 2,
                "data": {
                    "name": "nvidia-driver", "stream": template.replace("{b}", branch),
                    "version": int(f"{branch}00"), "context": "00000000", "arch": "x86_64",
                    "summary": "Nvidia driver (gpufleet test stand-in)",
                    "description": "Module stream of tests/ansible/graphs/rpm/rocky9.toml.",
                    "license": {"module": ["MIT"]},
                    "profiles": {"default": {"rpms": ["nvidia-open" if flavor == "open"
                                                      else "cuda-drivers"]}},
                    "artifacts": {"rpms": arts},
                },
            })
    return yaml.safe_dump_all(docs, explicit_start=True, explicit_end=True, sort_keys=False)


@dataclass
class RpmRepos:
    base: str  # http://addr:port
    rpms: list[Rpm]
    dirs: dict[str, str]
    major: int = 9

    def url(self, repo: str) -> str:
        return f"{self.base}/{self.dirs[repo]}/"


def new_mirror(root: Path, gnupg: Path, addr: str) -> tg.Mirror:
    """An empty mirror root and the run's signing key (exported as key.asc)."""
    root.mkdir(parents=True)
    gnupg.mkdir(mode=0o700, parents=True)
    gpg = ["gpg", "--homedir", str(gnupg), "--batch", "--yes", "--pinentry-mode", "loopback",
           "--passphrase", ""]
    tg.run([*gpg, "--quick-gen-key", "gpufleet rpm mirror <rpm@gpufleet.invalid>", "rsa2048",
            "sign", "1d"])
    tg.run([*gpg, "--armor", "--export", "-o", str(root / "key.asc")])
    base = f"http://{addr}:{tg.MIRROR_PORT}"
    return tg.Mirror(root=root, url=f"{base}/", key_url=f"{base}/key.asc", addr=addr)


def build(root: Path, mirror: tg.Mirror, gnupg: Path, major: int = 9) -> RpmRepos:
    """Build, sign and index every repository of the graph for EL `major` under the mirror root."""
    graph = load()
    rpms = expand(graph, major)
    dirs = repo_dirs(major)
    base = mirror.url.rstrip("/")
    top = root / "rpmbuild"
    for sub in ("SPECS", "RPMS", "BUILD", "BUILDROOT"):
        (top / sub).mkdir(parents=True, exist_ok=True)
    define = ["--define", f"_topdir {top}", "--define", "debug_package %{nil}",
              "--define", "__os_install_post %{nil}", "--define", "_build_id_links none",
              # the stand-in module (an ELF object) in the noarch DKMS package
              "--define", "_binaries_in_noarch_packages_terminate_build 0"]
    built: list[tuple[Rpm, Path]] = []
    for rpm in rpms:
        spec = top / "SPECS" / f"{rpm.name}-{rpm.version}.spec"
        spec.write_text(_spec(rpm, base, major))
        tg.run(["rpmbuild", "-bb", "--quiet", *define, str(spec)])
        built.append((rpm, top / "RPMS" / rpm.arch /
                      f"{rpm.name}-{rpm.version}-{rpm.release}.{rpm.arch}.rpm"))
    # The toolkit's packages carry a signing key the repository's gpgkey does not serve, as when
    # NVIDIA rotated its rpm key between releases (review L4): only the signed metadata is checked.
    rotated = gnupg.parent / "gnupg-rotated"
    rotated.mkdir(mode=0o700, exist_ok=True)
    tg.run(["gpg", "--homedir", str(rotated), "--batch", "--yes", "--pinentry-mode", "loopback",
            "--passphrase", "", "--quick-gen-key",
            "gpufleet rotated rpm key <rot@gpufleet.invalid>",
            "rsa2048", "sign", "1d"])
    for home, group in ((gnupg, [p for r, p in built if r.repo != "toolkit"]),
                        (rotated, [p for r, p in built if r.repo == "toolkit"])):
        keys = tg.run(["gpg", "--homedir", str(home), "--list-keys", "--with-colons"]).stdout
        uid = next(f.split(":")[9] for f in keys.splitlines() if f.startswith("uid:"))
        tg.run(["rpmsign", "--addsign", "--define", f"_gpg_path {home}", "--define",
                f"__gpg {shutil.which('gpg')}", "--define", f"_gpg_name {uid}",
                *(str(p) for p in group)])
    tg.run(["gpgconf", "--homedir", str(rotated), "--kill", "gpg-agent"])
    for repo, rel in dirs.items():
        d = root / rel
        (d / "Packages").mkdir(parents=True, exist_ok=True)
        for rpm, path in built:
            if rpm.repo == repo:
                shutil.copy(path, d / "Packages" / path.name)
        tg.run(["createrepo_c", "--quiet", "--no-database", str(d)])
    cuda = root / dirs["cuda"]
    modules = cuda / "modules.yaml"
    modules.write_text(_modulemd([r for r in rpms if r.repo == "cuda"]))
    tg.run(["modifyrepo_c", "--mdtype=modules", str(modules), str(cuda / "repodata")])
    # Signed metadata (repo_gpgcheck=1, as NVIDIA's libnvidia-container repo file asks for).
    for rel in dirs.values():
        tg.run(["gpg", "--homedir", str(gnupg), "--batch", "--yes", "--armor", "--detach-sign",
                "-o", str(root / rel / "repodata/repomd.xml.asc"),
                str(root / rel / "repodata/repomd.xml")])
    shutil.rmtree(top)
    return RpmRepos(base=base, rpms=rpms, dirs=dirs, major=major)


def rocky_repo_file(repos: RpmRepos) -> str:
    """What rocky-release puts in /etc/yum.repos.d (BaseOS, AppStream, extras on; CRB off, its id
    powertools on Rocky 8)."""
    out = []
    crb = "powertools" if repos.major == 8 else "crb"
    for repo, enabled in (("baseos", 1), ("appstream", 1), ("extras", 1), ("crb", 0)):
        out.append(f"[{crb if repo == 'crb' else repo}]\nname=Rocky Linux {repos.major} - {repo}\n"
                   f"baseurl={repos.url(repo)}\n"
                   f"enabled={enabled}\ngpgcheck=1\ngpgkey={repos.base}/key.asc\n")
    return "\n".join(out)


def lock_name(entry: str) -> str:
    """'nvidia-driver-3:580.95.05-1.el9.*' -> 'nvidia-driver' (dnf versionlock's NEVRA glob)."""
    m = re.match(r"^(.+?)-(?:\d+:)?[0-9][^-]*-[^-]+$", entry)
    return m.group(1) if m else entry
