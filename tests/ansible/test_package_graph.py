"""The package stand-ins cite a source for every fact they state (issue 23): a fact without one is
how a test passes against a fiction. Pure: reads the graph files, builds nothing."""

from __future__ import annotations

import copy

import pkggraph
import pytest

pytestmark = [pytest.mark.ansible]

GRAPHS = sorted(p.stem for p in pkggraph.GRAPHS.glob("*.toml"))


@pytest.mark.parametrize("name", GRAPHS)
def test_every_stand_in_fact_has_a_source(name: str) -> None:
    assert pkggraph.unsourced(pkggraph.load(name)) == []


def test_a_missing_or_malformed_source_is_caught() -> None:
    graph = copy.deepcopy(pkggraph.load("ubuntu2404"))
    gl = next(p for p in graph["package"] if p["name"] == "libnvidia-gl{s}")
    del gl["cite"]["depends"]
    graph["sources"]["renames"] = "NVIDIA said so"
    assert pkggraph.unsourced(graph) == [
        "[sources] renames: 'NVIDIA said so' is not a URL, repo@commit:path, capture: or inferred:",
        "libnvidia-gl{s}: depends has no source (cite.depends=None)",
    ]


def test_inferred_facts_are_told_apart() -> None:
    graph = pkggraph.load("ubuntu2404")
    assert pkggraph.sourced(graph, "libnvidia-compute-580", "name", "version")
    assert pkggraph.sourced(graph, "libnvidia-egl-wayland1", "version")
    assert not pkggraph.sourced(graph, "nvidia-modprobe", "version")
    assert not pkggraph.sourced(graph, "libnvidia-compute", "conflicts")
