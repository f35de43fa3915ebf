"""Which transport each connection of a smoke world really used, from NCCL's own init log.

The ranks run with NCCL_DEBUG=INFO and NCCL_DEBUG_SUBSYS=INIT,NET (unless the inventory's env
sets them); the host's cleanup keeps the lines after "NCCL INFO " that name a transport (section
`nccl_init`, deduplicated). Formats, from NVIDIA/nccl and a real capture:
- "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" (src/transport/net.cc
  sendSetup: net name IB|Socket, net device, "/GDRDMA", "(PCI)", "/Shared"; the PXN variant
  prints "%d(%d)", the proxy rank in parentheses); the same with "[receive]";
- "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM", "Using network Socket", "NET/IB : No device
  found.", "24 coll channels, 24 collnet channels, 0 nvls channels, …": tests/fixtures/
  h200x2-2026-11-30/bench.txt (a 2xH200 NCCL 2.28.9 run, captured);
- "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB ; OOB eth0:…" (net_ib.cc's device list; the
  "Using [RO]; OOB" form in the same capture, where no HCA was found).
A gloo world has no transport choice: it is recorded as "gloo/tcp".
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from gpufleet.model import NcclConnection, TransportRecord

# What the host keeps of its log (sed after "NCCL INFO "): a line must start like one of these.
KEEP = r"^(Channel [0-9]+/[0-9]+ : |Using network |NET/IB : |NET/Socket : |[0-9]+ coll channels)"
MAX_LINES = 4000

_CHANNEL = re.compile(
    r"^Channel [0-9]{1,3}/[0-9]{1,3} : ([0-9]{1,6})\[[0-9a-fx]{1,16}\] -> ([0-9]{1,6})"
    r"\[[0-9a-fx]{1,16}\] (?:\[(?:send|receive)\] )?via (\S{1,80})$")
_NET = re.compile(r"^NET/(\w{1,16})/([0-9]{1,4})(\([0-9]{1,6}\))?((?:/GDRDMA)?)")
_USING = re.compile(r"^Using network (\w{1,32})$")
_HCAS = re.compile(r"^NET/IB : Using ((?:\[[0-9]{1,3}\][A-Za-z0-9_.:/-]{1,64} ?)+)")
_NVLS = re.compile(r"^[0-9]{1,4} coll channels, .*?([0-9]{1,4}) nvls channels")


def parse_nccl_init(lines: Iterable[str]) -> TransportRecord | None:
    """The transport record of one world, from the kept init lines of all its hosts; None
    when no line names a transport (NCCL not used, or its logging was switched off)."""
    channels: dict[tuple[int, int, str], int] = {}
    nets: dict[tuple[int, int, str], tuple[int, bool, bool]] = {}  # dev, proxy, gdr (all)
    network = None
    hcas: list[str] = []
    absent = False
    nvls = None
    seen = False
    for raw in lines:
        line = raw.strip()
        if (m := _CHANNEL.match(line)) is not None:
            seen = True
            src, dst, via = int(m.group(1)), int(m.group(2)), m.group(3)
            net = _NET.match(via)
            kind = f"NET/{net.group(1)}" if net else via
            key = (src, dst, kind)
            channels[key] = channels.get(key, 0) + 1
            if net:
                gdr = bool(net.group(4)) and nets.get(key, (0, False, True))[2]
                nets[key] = (int(net.group(2)), bool(net.group(3)), gdr)
        elif (m := _USING.match(line)) is not None:
            seen, network = True, m.group(1)
        elif (m := _HCAS.match(line)) is not None:
            seen = True
            hcas += [h for h in re.split(r"\[[0-9]+\]", m.group(1)) if h.strip()]
        elif line.startswith("NET/IB : No device found"):
            seen, absent = True, True
        elif (m := _NVLS.match(line)) is not None:
            seen, nvls = True, int(m.group(1))
    if not seen:
        return None
    connections = tuple(
        NcclConnection(src=key[0], dst=key[1], transport=key[2], channels=n,
                       net_dev=nets[key][0] if key in nets else None,
                       gdr=nets[key][2] if key in nets else None,
                       proxy=nets[key][1] if key in nets else False)
        for key, n in sorted(channels.items()))
    return TransportRecord(source="nccl init log", network=network, connections=connections,
                           hcas=tuple(dict.fromkeys(h.strip() for h in hcas)), ib_absent=absent,
                           nvls_channels=nvls)


GLOO = TransportRecord(source="gloo", network="gloo/tcp")
