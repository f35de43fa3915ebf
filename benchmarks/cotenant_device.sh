#!/usr/bin/env bash
# Issue 36.3 on a lent GPU machine (local transport): a healthy full check saved into a store,
# then a compute hog on GPU 0 (benchmarks/gpu_hog.py --mode matmul) and a full check with --force
# saved into the same store (judged against the first: GF521/GF546 history drops). The one judge
# must give one GF549 naming the hog's pid with the GEMM dtypes and HBM as its evidence.
# Usage, on the device, from the repository root: bash benchmarks/cotenant_device.sh PREFIX
# Needs $OUT and the wheels in .whl (jsonschema and its needs, python-hostlist).
set -uo pipefail
P=${1:?prefix}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PATH=/opt/torch/.venv/bin:$PATH
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || exit
export PYTHONPATH=$PWD/agent:/tmp/site
exec > >(tee -a "$OUT/$P-session.log") 2>&1
date -u; echo "tree: ${GPUFLEET_COMMIT:-the working tree sent}"; nvidia-smi -L
S=/tmp/gf-cotenant-store
rm -rf "$S"
python3 -m gpufleet check --level full --format json -o "$OUT/$P-healthy.json" --save "$S"
echo "healthy full check: exit=$?"
python3 benchmarks/gpu_hog.py --gpu 0 --mode matmul --seconds 600 &
HOG=$!
trap 'kill $HOG 2>/dev/null; wait $HOG 2>/dev/null' EXIT
for _ in $(seq 60); do nvidia-smi --query-compute-apps=pid --format=csv,noheader | grep -q . && break; sleep 1; done
echo "hog pid $HOG; on the GPU: $(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader | tr '\n' ';')"
python3 -m gpufleet check --level full --force --format json -o "$OUT/$P-hog.json" --save "$S"
echo "co-tenant full check: exit=$?"
python3 -m gpufleet report "$OUT/$P-hog.json" --format table >"$OUT/$P-hog.txt"
cat "$OUT/$P-hog.txt"
python3 - "$OUT/$P-hog.json" <<'PY'
import json, sys
doc = json.load(open(sys.argv[1]))
for f in doc["findings"]:
    ms = f["evidence"].get("measurements") or []
    print(f["rule"], f["severity"], f["message"][:200], "| folded:", [m["rule"] for m in ms])
PY
date -u
