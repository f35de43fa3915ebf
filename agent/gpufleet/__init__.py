"""gpufleet: prove that GPU hosts match the inventory's desired state."""

__version__ = "0.1.0"
