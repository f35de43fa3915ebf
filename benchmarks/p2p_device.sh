#!/usr/bin/env bash
# The copy matrix's checks on a lent GPU machine (issue 25 item 4), one device call:
#   bash benchmarks/p2p_device.sh PREFIX       # e.g. 2026-12-02-nvidia-h200-s4-p2p
# 1. tests/gpu/test_p2p_gpu.py with its printout: the pair copy (cuda:0 -> cuda:0 on one GPU,
#    the same driver call and engine path as a peer read) against the membw HBM copy, and on
#    2+ GPUs the whole matrix;
# 2. two full checks, wall time each (issue 25: no slower than 38 s + 5 s on 1 x H200), with the
#    p2p check's detail and its seconds from the report (`timings_s.p2p_s` of rank 0).
# Needs $OUT (the device tool's output folder); writes PREFIX-* there.
set -uo pipefail
P=${1:?prefix}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PATH=/opt/torch/.venv/bin:$PATH PYTHONPATH=$PWD/agent
if compgen -G ".whl/*.whl" >/dev/null; then  # as benchmarks/device_session.sh
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit
  export PYTHONPATH=$PWD/agent:/tmp/site
fi
exec > >(tee -a "$OUT/$P-p2p.log") 2>&1
date -u; nvidia-smi -L
python3 -m pytest -q -s -m gpu tests/gpu/test_p2p_gpu.py -p no:cacheprovider
for i in 1 2; do
  t0=$(date +%s.%N)
  python3 -m gpufleet check --level full --format json -o "$OUT/$P-check-full-$i.json"
  rc=$?
  python3 - "$OUT/$P-check-full-$i.json" "$t0" "$rc" <<'EOF'
import json, sys, time
doc = json.load(open(sys.argv[1]))
for name, h in doc["hosts"].items():
    s = h.get("smoke") or {}
    p2p = next((c for c in s.get("checks", []) if c["name"] == "p2p"), None)
    print(f"{name}: exit={sys.argv[3]} wall_s={time.time() - float(sys.argv[2]):.1f} "
          f"p2p={p2p and p2p['detail']!r} p2p_s={(s.get('timings_s') or {}).get('p2p_s')}")
    print([f["rule"] for f in doc["findings"]])
EOF
done
date -u
