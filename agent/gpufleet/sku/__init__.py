"""The per-SKU reference catalog (skus.json): datasheet peaks and efficiency ratios, each number
with its source. Pure: load, validate, match a GPU to its model.

A GPU is matched on its PCI device id first (Facts.pci_gpus, by bus address), then on its
nvidia-smi name (whole-word, most specific model first: "H200 NVL" before "H200", "A100" never
as "A10"). No match is "no reference": the caller reports that and judges nothing, it never
guesses from a neighbour.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

# The numbers a model may carry (keys of skus.json models; the metric vocabulary's sources).
PEAK_KEYS = ("fp64_tflops", "fp32_tflops", "tf32_tflops", "bf16_tflops", "fp16_tflops",
             "fp8_tflops", "hbm_gbps", "nvlink_links", "nvlink_link_gbps", "pcie_gen",
             "pcie_width", "power_w", "nic_gbit")


class CatalogError(ValueError):
    """skus.json is malformed: a number without a source, an unknown source, a bad id."""


@dataclass(frozen=True)
class Sourced:
    value: float
    source: str  # a key of Catalog.sources


@dataclass(frozen=True)
class Model:
    key: str  # "H200-SXM"
    arch: str  # "hopper": the efficiency table it uses
    pci_device_ids: tuple[str, ...]  # "0x2335", upper-case hex digits
    names: tuple[str, ...]  # whole-word patterns for the nvidia-smi name
    peaks: Mapping[str, Sourced] = field(default_factory=dict)
    ids_source: str | None = None


@dataclass(frozen=True)
class Catalog:
    sources: Mapping[str, Mapping[str, str]]  # id -> {"kind", "cite"}
    models: tuple[Model, ...]
    efficiency: Mapping[str, Mapping[str, Sourced]]  # arch -> metric -> ratio
    floors: Mapping[str, Sourced]  # "compute" | "hbm" | "pinned" -> fraction of expected

    def cite(self, source: str) -> str:
        return self.sources[source]["cite"]


def _sourced(node: Any, where: str, sources: Mapping[str, Any]) -> Sourced:
    if not isinstance(node, Mapping) or set(node) != {"v", "src"}:
        raise CatalogError(f"{where}: a number must be {{\"v\": N, \"src\": SOURCE}}, got {node!r}")
    v, src = node["v"], node["src"]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise CatalogError(f"{where}: value must be a positive number, got {v!r}")
    if not isinstance(src, str) or src not in sources:
        raise CatalogError(f"{where}: source {src!r} is not in the catalog's sources")
    return Sourced(float(v), src)


def _stray_numbers(node: Any, where: str) -> None:
    """Any number outside a {v, src} pair is one without a source."""
    if isinstance(node, Mapping):
        if set(node) == {"v", "src"}:
            return
        for k, v in node.items():
            _stray_numbers(v, f"{where}.{k}")
    elif isinstance(node, list):
        for i, v in enumerate(node):
            _stray_numbers(v, f"{where}[{i}]")
    elif isinstance(node, (int, float)) and not isinstance(node, bool):
        raise CatalogError(f"{where}: number {node!r} has no source")


def parse(doc: Mapping[str, Any]) -> Catalog:
    """Validate and build a Catalog from skus.json's parsed JSON (CatalogError when bad)."""
    _stray_numbers(doc, "catalog")
    sources = doc.get("sources")
    if not isinstance(sources, Mapping) or not all(
            isinstance(s, Mapping) and s.get("cite") and s.get("kind") for s in sources.values()):
        raise CatalogError("catalog.sources: every source needs a 'kind' and a 'cite'")
    models: list[Model] = []
    for i, m in enumerate(doc.get("models") or ()):
        where = f"models[{i}] ({m.get('key')})"
        ids = tuple(str(x).upper().replace("0X", "0x") for x in m.get("pci_device_ids") or ())
        if ids and m.get("ids_src") not in sources:
            raise CatalogError(f"{where}: PCI ids need an 'ids_src' from the sources")
        if any(not re.fullmatch(r"0x[0-9A-F]{4}", x) for x in ids):
            raise CatalogError(f"{where}: PCI device ids look like 0x2335, got {ids}")
        peaks = {k: _sourced(m[k], f"{where}.{k}", sources) for k in PEAK_KEYS if k in m}
        unknown = set(m) - set(PEAK_KEYS) - {"key", "arch", "pci_device_ids", "ids_src", "names"}
        if unknown:
            raise CatalogError(f"{where}: unknown fields {sorted(unknown)}")
        models.append(Model(key=str(m["key"]), arch=str(m["arch"]), pci_device_ids=ids,
                            names=tuple(m.get("names") or ()), peaks=peaks,
                            ids_source=m.get("ids_src")))
    eff_doc = dict(doc.get("efficiency") or {})
    eff_doc.pop("about", None)
    floor_doc = dict(eff_doc.pop("floor", {}))
    floor_doc.pop("about", None)
    efficiency = {arch: {k: _sourced(v, f"efficiency.{arch}.{k}", sources)
                         for k, v in table.items()} for arch, table in eff_doc.items()}
    floors = {k: _sourced(v, f"efficiency.floor.{k}", sources) for k, v in floor_doc.items()}
    return Catalog(sources=sources, models=tuple(models), efficiency=efficiency, floors=floors)


@cache
def load() -> Catalog:
    text = resources.files(__package__).joinpath("skus.json").read_text(encoding="utf-8")
    return parse(json.loads(text))


def _name_matches(pattern: str, name: str) -> bool:
    return re.search(r"(?<![A-Za-z0-9])" + re.escape(pattern) + r"(?![A-Za-z0-9])", name) \
        is not None


def match(name: str | None, pci_device_id: str | None = None,
          catalog: Catalog | None = None) -> tuple[Model | None, str]:
    """(model, how): how is "pci_device_id 0x2335", "name 'H200'" or "no reference"."""
    cat = catalog or load()
    if pci_device_id:
        dev = pci_device_id.upper().replace("0X", "0x")[:6]  # "0x233510DE" (NVML) -> "0x2335"
        for m in cat.models:
            if dev in m.pci_device_ids:
                return m, f"pci_device_id {dev}"
    for m in cat.models:
        for pat in m.names:
            if name and _name_matches(pat, name):
                return m, f"name {pat!r}"
    return None, "no reference"


def efficiency(model: Model, metric: str,
               catalog: Catalog | None = None) -> tuple[Sourced, str] | None:
    """(ratio, basis): the model's own arch ("measured"), else the lowest any arch has for the
    metric ("borrowed", see skus.json efficiency.about); None when no arch has one."""
    cat = catalog or load()
    own = cat.efficiency.get(model.arch, {}).get(metric)
    if own is not None:
        return own, "measured"
    others = [t[metric] for t in cat.efficiency.values() if metric in t]
    if not others:
        return None
    return min(others, key=lambda s: s.value), "borrowed"


@dataclass(frozen=True)
class NvLinkNorm:
    """A healthy GPU of `model`'s NVLinks: how many are active and each one's rate (GB/s one way,
    as `nvidia-smi nvlink -s` prints it). From skus.json, the one home of both numbers."""

    model: str
    links: int
    link_gbps: float


def nvlink_norm(name: str | None, pci_device_id: str | None = None,
                catalog: Catalog | None = None) -> NvLinkNorm | None:
    """The model's NVLink norm; None for no reference or a model without NVLink (L40S, PCIe
    A100): nothing to judge its links against."""
    model, _ = match(name, pci_device_id, catalog)
    if model is None:
        return None
    links, rate = model.peaks.get("nvlink_links"), model.peaks.get("nvlink_link_gbps")
    if links is None or rate is None:
        return None
    return NvLinkNorm(model.key, int(links.value), rate.value)
