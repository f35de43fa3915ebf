#!/usr/bin/env bash
# One device call that exercises the merged main on a lent GPU machine (local transport):
# two full checks saved into one store (the second judged against the first: history, last
# known-good), `history`, the HTML page from the store, a full node-check with node-local Xid
# history and counters, and the GPU tests. Usage (from the repository root, on the device):
#   bash benchmarks/device_session.sh PREFIX      # e.g. 2026-12-01-nvidia-h200-s3-main
# Needs $OUT (the device tool's output folder) and, for jsonschema, the wheels in .whl
# (see /work/.library/device/README.md); writes PREFIX-* files and PREFIX-session.log under $OUT.
set -uo pipefail
P=${1:?prefix}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export PATH=/opt/torch/.venv/bin:$PATH
if compgen -G ".whl/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit
  export PYTHONPATH=$PWD/agent:/tmp/site
else
  export PYTHONPATH=$PWD/agent
fi
exec > >(tee -a "$OUT/$P-session.log") 2>&1
date -u; echo "tree: ${GPUFLEET_COMMIT:-the working tree sent (set GPUFLEET_COMMIT to name it)}"; nvidia-smi -L
S=/tmp/gpufleet-store
elapsed() { python3 -c "import time,sys; print(round(time.time()-float(sys.argv[1]),1))" "$1"; }
for i in 1 2; do
  t0=$(date +%s.%N)
  python3 -m gpufleet check --level full --format json -o "$OUT/$P-check-full-$i.json" --save $S
  echo "check full $i: exit=$? wall_s=$(elapsed "$t0")"
done
python3 -m gpufleet history --store $S >"$OUT/$P-history.txt"; echo "history: exit=$?"
cat "$OUT/$P-history.txt"
python3 -m gpufleet report "$(ls $S/gpufleet-*.json | tail -1)" --store $S --format html \
  -o "$OUT/$P-check-full-2.html"; echo "html: exit=$?"
t0=$(date +%s.%N)
python3 -m gpufleet node-check --level full --history /tmp/gpufleet-node --counters \
  /tmp/gpufleet-node/counters.json --format json -o "$OUT/$P-node-check-full.json"
echo "node-check full: exit=$? wall_s=$(elapsed "$t0")"
python3 -m gpufleet node-check --level facts --history /tmp/gpufleet-node --counters \
  /tmp/gpufleet-node/counters.json >"$OUT/$P-node-check-facts.txt"; echo "node-check facts (second): exit=$?"
python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider 2>&1 | tail -3 | tee "$OUT/$P-tests-gpu.txt"
date -u
