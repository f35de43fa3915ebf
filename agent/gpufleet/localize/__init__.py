"""`gpufleet localize`: adaptive group testing over multinode smoke worlds (docs/localize.md)."""

from gpufleet.localize.judge import Expectation, Measured, Verdict, judge
from gpufleet.localize.search import Localization, Suspect, World, WorldRunner, localize

__all__ = ["Expectation", "Localization", "Measured", "Suspect", "Verdict", "World",
           "WorldRunner", "judge", "localize"]
