"""Per-HCA GPUDirect RDMA bandwidth where perftest is installed (full level, GPU worlds).

Local rank 0 of each host runs, for every RDMA port that is ACTIVE, a loopback
`ib_write_bw --use_cuda=GPU --report_gbits` pair (server, then client to localhost) with the
GPU nearest the HCA (same NUMA node, from sysfs) and, where numactl exists, both processes
pinned to that NUMA node: Azure's azure_ib_write_bw_gdr.nhc does the same per HCA. Without
ib_write_bw the check records "not run" and passes; so does a host without an ACTIVE port.

The output format is perftest's (linux-rdma/perftest, e.g. the captures quoted in its issues
#234 and #273): a `#bytes #iterations BW peak[Gb/sec] BW average[Gb/sec] MsgRate[Mpps]` header
and one row per message size; the average of the last row is the HCA's bandwidth.

Judged on rank 0 against a floor per HCA: the published per-HCA GDR floors where the GPU is
known (Azure's conf files: H100 > 380, H200 > 360, A100 > 180 Gb/s, anchors review §1A), never
above 0.9 x the port's rate (Azure's H200 floor is 0.9 x its 400 Gb/s NDR port: an inference
for other SKUs); a port slower than expected is GF451's.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import time

from . import progress as pg

SYS_IB = os.environ.get("GPUFLEET_SYS_CLASS_INFINIBAND", "/sys/class/infiniband")
SYS_PCI = os.environ.get("GPUFLEET_SYS_PCI_DEVICES", "/sys/bus/pci/devices")
FLOORS_GBIT = (("H100", 380.0), ("H200", 360.0), ("A100", 180.0))
RATE_FRACTION = 0.9
DURATION_S = 2
_ROW = re.compile(r"^\s*([0-9]+)\s+([0-9]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s*$")
_RATE = re.compile(r"^([0-9]+(?:\.[0-9]+)?) Gb/sec")


def parse_ib_write_bw(text):
    """BW average (Gb/s) of the last data row under a `BW average[Gb/sec]` header, else None."""
    header = False
    value = None
    for line in text.splitlines():
        if "BW average[Gb/sec]" in line:
            header = True
            continue
        m = _ROW.match(line) if header else None
        if m:
            value = float(m.group(4))
    return value


def _read(path):
    try:
        with open(path) as f:
            return f.read().strip()
    except OSError:
        return None


def active_ports():
    """[(device, port, rate Gb/s, numa node)] for every ACTIVE RDMA port."""
    out = []
    for state in sorted(glob.glob(os.path.join(SYS_IB, "*", "ports", "*", "state"))):
        port_dir = os.path.dirname(state)
        if not (_read(state) or "").endswith("ACTIVE"):
            continue
        dev = os.path.basename(os.path.dirname(os.path.dirname(port_dir)))
        m = _RATE.match(_read(os.path.join(port_dir, "rate")) or "")
        numa = _read(os.path.join(SYS_IB, dev, "device", "numa_node"))
        out.append((dev, os.path.basename(port_dir), float(m.group(1)) if m else None,
                    int(numa) if numa and numa.lstrip("-").isdigit() else -1))
    return out


def _gpu_numa(torch):
    """GPU index -> NUMA node, from the PCI address torch reports (None where unknown)."""
    out = {}
    for i in range(torch.cuda.device_count()):
        p = torch.cuda.get_device_properties(i)
        bus = getattr(p, "pci_bus_id", None)
        addr = "%04x:%02x:%02x.0" % (getattr(p, "pci_domain_id", 0), bus,
                                     getattr(p, "pci_device_id", 0)) if bus is not None else None
        node = _read(os.path.join(SYS_PCI, addr, "numa_node")) if addr else None
        out[i] = int(node) if node and node.lstrip("-").isdigit() else None
    return out


def _pinned(numa):
    if numa is not None and numa >= 0 and shutil.which("numactl"):
        return ["numactl", "--cpunodebind=%d" % numa, "--membind=%d" % numa]
    return []


def loopback(exe, hca, gpu, numa, tcp_port):
    """One server/client pair on this host for hca = (device, port); (Gb/s or None, error)."""
    args = [exe, "-d", hca[0], "-i", str(hca[1]), "--use_cuda=%d" % gpu, "--report_gbits",
            "-F", "-D", str(DURATION_S), "-p", str(tcp_port)]
    server = subprocess.Popen([*_pinned(numa), *args], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)
    try:
        time.sleep(1.0)
        res = subprocess.run([*_pinned(numa), *args, "localhost"], capture_output=True,
                             text=True, timeout=DURATION_S + 30, check=False)
    except subprocess.TimeoutExpired:
        return None, "ib_write_bw did not finish in %d s" % (DURATION_S + 30)
    finally:
        server.kill()
        server.wait()
    gbps = parse_ib_write_bw(res.stdout)
    if gbps is None:
        tail = (res.stderr or res.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, "ib_write_bw exit %d: %s" % (res.returncode, tail[0][:200])
    return gbps, None


def rank_gdr(c):
    if pg.LOCAL_RANK != 0:
        return {"passed": True, "not_run": "local rank 0 runs the host's loopbacks"}
    exe = shutil.which("ib_write_bw")
    if exe is None:
        return {"passed": True, "not_run": "ib_write_bw (perftest) is not installed"}
    ports = active_ports()
    if not ports:
        return {"passed": True, "not_run": "no ACTIVE RDMA port"}
    gpus = _gpu_numa(c.torch)
    hcas = []
    for k, (dev, port, rate, numa) in enumerate(ports):
        near = [g for g, n in sorted(gpus.items()) if n is not None and n == numa]
        gpu = near[0] if near else 0
        gbps, error = loopback(exe, (dev, port), gpu, numa, 18515 + k)
        hcas.append({"hca": "%s/%s" % (dev, port), "gpu": gpu, "numa": numa,
                     "rate_gbit": rate, "gbps": gbps, "error": error})
    return {"passed": True, "hcas": hcas, "rank": pg.RANK}


def _floor(rate, device_name):
    sku = next((f for name, f in FLOORS_GBIT if name in (device_name or "")), None)
    limit = RATE_FRACTION * rate if rate else None
    if sku is not None and limit is not None:
        return min(sku, limit), "published GDR floor for %s, at most 0.9 x the port" % \
            next(n for n, _ in FLOORS_GBIT if n in device_name)
    if limit is not None:
        return limit, "0.9 x the port's rate"
    return sku, "published GDR floor" if sku is not None else None


def agg_gdr(ranks):
    rows, not_run, bad = [], [], []
    for r in ranks:
        c = r["checks"].get("gdr") or {}
        host = r["info"]["host"]
        if c.get("not_run") and int(r["info"].get("local_rank", 0)) == 0:
            not_run.append("%s: %s" % (host, c["not_run"]))
        for h in c.get("hcas") or ():
            floor, basis = _floor(h.get("rate_gbit"), r["info"].get("device_name"))
            row = dict(h, host=host, floor_gbit=floor, basis=basis)
            rows.append(row)
            if h.get("error") or (floor is not None and (h.get("gbps") or 0) < floor):
                bad.append(row)
    data = {"hcas": rows, "not_run": not_run}
    if not rows:
        return True, "GPUDirect bandwidth not run (%s)" % ("; ".join(not_run) or "no host"), data
    if bad:
        return False, "; ".join(
            "%s %s (GPU %s): %s" % (b["host"], b["hca"], b["gpu"], b["error"] or
                                    "%.1f Gb/s < %.0f Gb/s (%s)" % (b["gbps"], b["floor_gbit"],
                                                                     b["basis"]))
            for b in bad), data
    return True, "GPUDirect %s" % ", ".join(
        "%s %s %.1f Gb/s" % (r["host"], r["hca"], r["gbps"]) for r in rows), data
