"""Where things are in this checkout. The collection (galaxy.yml, roles/, playbooks/, plugins/)
lives in its own `ansible_collections/gpufleet/gpu/` directory, the agent and these tests at the
repository root (docs/layout.md says why): a test names a collection path through COLLECTION."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COLLECTION = REPO / "ansible_collections" / "gpufleet" / "gpu"
