"""The RHEL rpm graph cites a source for every fact it states, and its module metadata is what
libmodulemd reads (issue 24). Pure: reads the graph, builds no package."""

from __future__ import annotations

import copy

import pytest
import rpmgraph
import yaml

pytestmark = [pytest.mark.ansible]


def test_every_rpm_stand_in_fact_has_a_source() -> None:
    assert rpmgraph.unsourced(rpmgraph.load()) == []


def test_a_missing_rpm_source_is_caught() -> None:
    graph = copy.deepcopy(rpmgraph.load())
    kmod = next(p for p in graph["package"] if p["name"] == "kmod-nvidia-open-dkms")
    del kmod["cite"]["requires"]
    assert rpmgraph.unsourced(graph) == [
        "kmod-nvidia-open-dkms: requires has no source (cite.requires=None)"]


def test_streams_list_each_branch_in_both_flavors() -> None:
    rpms = [r for r in rpmgraph.expand(rpmgraph.load()) if r.repo == "cuda"]
    docs = list(yaml.safe_load_all(rpmgraph._modulemd(rpms)))
    streams = {d["data"]["stream"]: d["data"]["artifacts"]["rpms"] for d in docs}
    assert sorted(streams) == ["580-dkms", "580-open", "590-dkms", "590-open"]
    assert "nvidia-driver-3:580.95.05-1.el9.x86_64" in streams["580-open"]
    assert "kmod-nvidia-open-dkms-3:580.95.05-1.el9.noarch" in streams["580-open"]
    assert not [a for a in streams["580-open"] if "590." in a or "latest-dkms" in a]
    open_only = ("nvidia-open-", "kmod-nvidia-open")
    assert not [a for a in streams["580-dkms"] if a.startswith(open_only)]
    fm = [a for s in streams.values() for a in s if a.startswith("nvidia-fabricmanager")]
    assert fm == []


def test_lock_entries_are_read_by_exact_name() -> None:
    entry = "kmod-nvidia-open-dkms-3:580.95.05-1.el9.*"
    assert rpmgraph.lock_name(entry) == "kmod-nvidia-open-dkms"
    assert rpmgraph.lock_name("nvidia-open-3:580.95.05-1.el9.*") == "nvidia-open"
