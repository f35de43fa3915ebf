"""Local apt repositories that reproduce NVIDIA's CUDA repository and Docker's repository as package
graphs (names, versions, Depends/Conflicts, pinning packages) from tests/ansible/graphs/*.toml,
built with dpkg-deb + apt-ftparchive into tiny .debs and signed with the run's key; plus the
"documented way" sources a host already has for them (cuda-keyring's list,
nvidia-container-toolkit.list, docker.sources), each with its own Signed-By keyring.
"""

from __future__ import annotations

import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import roletarget as tg
import tomllib

GRAPHS = Path(__file__).resolve().parent / "graphs"


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    arch: str
    src: str = ""
    depends: str = ""
    conflicts: str = ""
    replaces: str = ""
    files: tuple[tuple[str, str], ...] = ()


# The facts a package entry can state; each one it states needs a `cite` key (version always:
# the default "{u}" is a claim too).
FACTS = ("name", "version", "src", "depends", "conflicts", "files", "arch")
SOURCE_FORMS = re.compile(
    r"^(https://\S+|[\w.-]+/[\w.-]+@[0-9a-f]{7,40}:\S+|capture: |inferred: |issue \d+ )"
)


def load(name: str) -> dict[str, Any]:
    return tomllib.loads((GRAPHS / f"{name}.toml").read_text())


def unsourced(graph: dict[str, Any]) -> list[str]:
    """Every stated fact without a source, and every source that is none of the accepted forms."""
    sources: dict[str, str] = graph["sources"]
    bad = [f"[sources] {k}: {v[:60]!r} is not a URL, repo@commit:path, capture: or inferred:"
           for k, v in sources.items() if not SOURCE_FORMS.match(v)]
    for spec in [*graph["package"], *graph["docker"]]:
        cite: dict[str, str] = spec.get("cite", {})
        stated = {"name", "version"} | {f for f in FACTS if f in spec}
        if spec.get("replaces_580"):
            stated.add("conflicts")
        for fact in sorted(stated):
            if cite.get(fact) not in sources:
                bad.append(f"{spec['name']}: {fact} has no source (cite.{fact}={cite.get(fact)!r})")
    return bad


def sourced(graph: dict[str, Any], name: str, *facts: str) -> bool:
    """Whether every named fact of the package whose name template expands to `name` rests on
    more than an inference (a test asserts on a package only when this holds)."""
    for spec in [*graph["package"], *graph["docker"]]:
        pattern = re.escape(spec["name"]).replace(r"\{s\}", "(-\\d+)?").replace(
            r"\{b\}", "\\d+").replace(r"\{v\}", "[0-9.]+")
        if re.fullmatch(pattern, name):
            cite = spec.get("cite", {})
            return all(not graph["sources"][cite[f]].startswith("inferred:") for f in facts)
    raise KeyError(f"{name} is not in the graph")


def _revision(graph: dict[str, Any], version: str) -> str:
    return f"{version}-{graph.get('revision', {}).get(version, '0ubuntu1')}"


def expand(graph: dict[str, Any], arch: str) -> tuple[list[Deb], list[Deb]]:
    """The driver repository's and Docker's packages, every template expanded per branch/version."""
    driver: dict[str, list[str]] = graph["driver"]
    pins = set(graph.get("pinning", {}).get("versions", []))
    cuda: list[Deb] = []
    for spec in graph["package"]:
        pairs = [
            (b, v)
            for b in spec["branches"]
            for v in (driver[b][-1:] if spec.get("latest_only") else driver[b])
            if not spec.get("pinning_only") or v in pins
        ] or ([] if spec["branches"] else [("", "")])
        for b, v in pairs:
            s = f"-{b}" if b and int(b) < 590 else ""

            def fill(t: str, b: str = b, v: str = v, s: str = s) -> str:
                return (t.replace("{u}", _revision(graph, v)).replace("{v}", v)
                        .replace("{b}", b).replace("{s}", s))

            old = fill(spec["name"], s="-580") if spec.get("replaces_580") and s == "" else ""
            cuda.append(
                Deb(
                    name=fill(spec["name"]),
                    version=fill(spec.get("version", "{u}")),
                    arch=spec.get("arch", arch),
                    src=fill(spec.get("src", "")),
                    depends=fill(spec.get("depends", "")),
                    conflicts=old,
                    replaces=old,
                    files=tuple((fill(k), fill(c)) for k, c in spec.get("files", {}).items()),
                )
            )
    docker = [
        Deb(name=d["name"], version=d["version"], arch=arch, depends=d.get("depends", ""),
            conflicts=d.get("conflicts", ""))
        for d in graph["docker"]
    ]
    return cuda, docker


def build_deb(deb: Deb, outdir: Path) -> Path:
    tree = outdir / f"tree-{deb.name}-{deb.version.replace(':', '_')}"
    (tree / "DEBIAN").mkdir(parents=True)
    control = [f"Package: {deb.name}"]
    if deb.src and deb.src != deb.name:
        control.append(f"Source: {deb.src}")
    control += [
        f"Version: {deb.version}",
        f"Architecture: {deb.arch}",
        "Maintainer: gpufleet tests <tests@gpufleet.invalid>",
        "Section: utils",
        "Priority: optional",
    ]
    if deb.depends:
        control.append(f"Depends: {deb.depends}")
    if deb.conflicts:
        control.append(f"Conflicts: {deb.conflicts}")
    if deb.replaces:
        control.append(f"Replaces: {deb.replaces}")
    control += [
        f"Description: gpufleet test stand-in for {deb.name}",
        " Package graph only; see tests/ansible/graphs/ for where each fact comes from.",
    ]
    (tree / "DEBIAN/control").write_text("\n".join(control) + "\n")
    for rel, content in deb.files:
        dest = tree / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(content)
    out = outdir / f"{deb.name}_{deb.version.replace(':', '%3a')}_{deb.arch}.deb"
    tg.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(tree), str(out)])
    shutil.rmtree(tree)
    return out


def _sign(directory: Path, gpg: list[str]) -> None:
    tg.run([*gpg, "--clearsign", "-o", str(directory / "InRelease"), str(directory / "Release")])
    tg.run(
        [
            *gpg,
            "--armor",
            "--detach-sign",
            "-o",
            str(directory / "Release.gpg"),
            str(directory / "Release"),
        ]
    )


@dataclass(frozen=True)
class GraphRepos:
    cuda_url: str
    docker_url: str
    toolkit_url: str
    key_url: str
    key_binary: Path
    debs: dict[str, Path]


def build(
    root: Path, mirror: tg.Mirror, gpg: list[str], graph_name: str, codename: str
) -> GraphRepos:
    """Under the toolkit mirror's root (same server, same key): cuda/ (flat, NVIDIA's layout) and
    docker/ (dists/<codename>/stable, Docker's layout)."""
    arch = tg.run(["dpkg", "--print-architecture"]).stdout.strip()
    graph = load(graph_name)
    cuda, docker = expand(graph, arch)
    debs: dict[str, Path] = {}
    flat = root / "cuda"
    flat.mkdir(parents=True)
    for deb in cuda:
        debs[f"{deb.name}={deb.version}"] = build_deb(deb, flat)
    tg.run(["sh", "-c", "apt-ftparchive packages . > Packages && gzip -k Packages"], cwd=flat)
    rel = tg.run(["apt-ftparchive", "release", "."], cwd=flat).stdout
    (flat / "Release").write_text(rel)
    _sign(flat, gpg)
    dist = root / "docker" / "dists" / codename
    pool = root / "docker" / "pool" / "stable"
    pool.mkdir(parents=True)
    for deb in docker:
        build_deb(deb, pool)
    binary = dist / "stable" / f"binary-{arch}"
    binary.mkdir(parents=True)
    tg.run(
        ["sh", "-c", f"apt-ftparchive packages pool > {binary / 'Packages'}"], cwd=root / "docker"
    )
    tg.run(["gzip", "-k", str(binary / "Packages")])
    rel = tg.run(
        [
            "apt-ftparchive",
            "-o",
            f"APT::FTPArchive::Release::Codename={codename}",
            "-o",
            f"APT::FTPArchive::Release::Suite={codename}",
            "-o",
            "APT::FTPArchive::Release::Components=stable",
            "-o",
            f"APT::FTPArchive::Release::Architectures={arch}",
            "release",
            ".",
        ],
        cwd=dist,
    ).stdout
    (dist / "Release").write_text(rel)
    _sign(dist, gpg)
    key_binary = root.parent / "archive-keyring.gpg"
    tg.run([*gpg, "--export", "-o", str(key_binary)])
    base = mirror.url.rstrip("/")
    # NVIDIA's documented toolkit list names .../stable/deb/$(ARCH) (cloud-native-docs
    # container-toolkit/install-guide.md); apt expands $(ARCH) (Debian/apt apt-pkg/sourcelist.cc
    # FixupURI). The flat toolkit mirror answers there too.
    (root / "stable" / "deb").mkdir(parents=True)
    (root / "stable" / "deb" / arch).symlink_to("../..")
    return GraphRepos(
        cuda_url=f"{base}/cuda/",
        docker_url=f"{base}/docker",
        toolkit_url=f"{base}/stable/deb/$(ARCH)",
        key_url=mirror.key_url,
        key_binary=key_binary,
        debs=debs,
    )


OS_RELEASE = {
    "ubuntu2404": (
        'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nNAME="Ubuntu"\nVERSION_ID="24.04"\n'
        'VERSION="24.04.3 LTS (Noble Numbat)"\nVERSION_CODENAME=noble\nID=ubuntu\nID_LIKE=debian\n'
        "UBUNTU_CODENAME=noble\n"
    )
}


def documented_sources(t: tg.Target, repos: GraphRepos, codename: str, armored_key: Path) -> None:
    """Sources as NVIDIA's and Docker's install guides set them up: cuda-keyring's list and keyring,
    the toolkit's nvidia-container-toolkit.list (its URI ending in $(ARCH), as documented), Docker's
    deb822 docker.sources with Architectures: and docker.asc."""
    keyrings = t.root / "usr/share/keyrings"
    keyrings.mkdir(parents=True, exist_ok=True)
    shutil.copy(repos.key_binary, keyrings / "cuda-archive-keyring.gpg")
    shutil.copy(repos.key_binary, keyrings / "nvidia-container-toolkit-keyring.gpg")
    etc_keyrings = t.root / "etc/apt/keyrings"
    etc_keyrings.mkdir(parents=True, exist_ok=True)
    shutil.copy(armored_key, etc_keyrings / "docker.asc")
    lists = t.root / "etc/apt/sources.list.d"
    (lists / "cuda-ubuntu2404-x86_64.list").write_text(
        f"deb [signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg] {repos.cuda_url} /\n"
    )
    (lists / "nvidia-container-toolkit.list").write_text(
        "deb [signed-by=/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg] "
        f"{repos.toolkit_url} /\n"
    )
    # Docker's deb822 file names the architecture (docker/docs content/manuals/engine/install/
    # ubuntu.md: "Architectures: $(dpkg --print-architecture)", expanded when it is written).
    arch = tg.run(["dpkg", "--print-architecture"]).stdout.strip()
    (lists / "docker.sources").write_text(
        f"Types: deb\nURIs: {repos.docker_url}\nSuites: {codename}\nComponents: stable\n"
        f"Architectures: {arch}\nSigned-By: /etc/apt/keyrings/docker.asc\n"
    )
