#!/bin/bash
# Issue 25 on the lent 1xH200 (one device call): nvbandwidth built from source, plain-torch
# anchors, then gpufleet's smoke healthy and with three co-tenants. Results land in $OUT;
# they are committed under benchmarks/results/ as 2026-12-01-nvidia-h200-k-*.
# Carries tmp/kdev/ (nvbandwidth's source at NVIDIA/nvbandwidth@66746a3 and Debian bookworm's
# libboost-program-options1.74-dev, libboost-program-options1.74.0, libboost1.74-dev .debs).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/agent
PY=/opt/torch/.venv/bin/python
[ -x "$PY" ] || PY=python3
P=2026-12-01-nvidia-h200-k
{ date -u; git log -1 --oneline 2>&1; nvidia-smi -L; $PY -c 'import torch; print(torch.__version__)'; } > "$OUT/$P-env.txt" 2>&1
T0=$(date +%s)
X=/tmp/boost; mkdir -p "$X"
{ for d in tmp/kdev/*.deb; do dpkg -x "$d" "$X"; done
  cmake -S tmp/kdev/nvbandwidth -B /tmp/nvbw -DCMAKE_CUDA_ARCHITECTURES=90 \
    -DBoost_DIR="$X/usr/lib/x86_64-linux-gnu/cmake/Boost-1.74.0" -DBoost_NO_SYSTEM_PATHS=ON \
  && cmake --build /tmp/nvbw -j 16; } > "$OUT/$P-nvbandwidth-build.log" 2>&1
echo "nvbandwidth build rc=$? in $(( $(date +%s) - T0 )) s" >> "$OUT/$P-env.txt"
if [ -x /tmp/nvbw/nvbandwidth ]; then
  timeout 150 /tmp/nvbw/nvbandwidth -j -t host_to_device_memcpy_ce device_to_host_memcpy_ce \
    device_local_copy > "$OUT/$P-nvbandwidth.json" 2> "$OUT/$P-nvbandwidth.err"
fi
timeout 90 "$PY" benchmarks/gemm_anchor.py > "$OUT/$P-anchors-torch.json" 2> "$OUT/$P-anchors-torch.err"
timeout 400 "$PY" benchmarks/smoke_device.py --out "$OUT" --prefix "$P" --python "$PY" \
  full quick hog-matmul-full hog-mem-full hog-copy-full
echo "total $(( $(date +%s) - T0 )) s" >> "$OUT/$P-env.txt"
