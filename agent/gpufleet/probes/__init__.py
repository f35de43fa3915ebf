"""Probes: one shipped POSIX sh script per host, parsed locally by pure parsers.

`collect()` is the only function here that touches a host (through the injected Transport).
The fact families and their parsers live in their own modules, listed in `families.py`.
"""

from gpufleet.probes.collect import collect, parse_probe_output, probe_script

__all__ = ["collect", "parse_probe_output", "probe_script"]
