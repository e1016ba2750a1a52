#!/usr/bin/env bash
# GPU check, one prepared run for a machine with CUDA (< 5 minutes on one GPU):
#   1. FlexAttention parity: the flex path (BlockMask) equals the sdpa path, packed equals separate;
#   2. the benchmark rows on the GPU: packed (flex_attention) vs sdpa vs separate, --dtype auto (bf16);
#   3. a short training smoke run (20 steps of configs/general.yaml's mix, bf16 autocast) that writes
#      an artifact, then answers examples/review.json with it.
# Needs the project installed (`pip install -e ".[test]"`) and the embedded backbone set up
# (`kevlike fetch`, or its converted directory copied to $KEVLIKE_HOME/backbones/). Results go to
# $OUT (default runs/gpu-check/). Nothing here is needed on the CPU: every step also runs there, slower.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-runs/gpu-check}
mkdir -p "$OUT"
python - <<'PY'
import torch
assert torch.cuda.is_available(), "no CUDA device: this script is for a GPU machine"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
PY
start=$(date +%s)
timeout 120 python -m pytest -q tests/test_flex.py tests/test_parity.py 2>&1 | tee "$OUT/tests.log"
timeout 120 kevlike bench --quick --compare sdpa --json "$OUT/bench.json" 2>&1 | tee "$OUT/bench.log"
timeout 150 kevlike train configs/general.yaml max_steps=20 eval_every=20 checkpoint_every=10 validation.n=1 \
  max_minutes=2 output_dir="$OUT/train" --quiet 2>&1 | tee "$OUT/train.log"
artifact=$(ls -d "$OUT"/train/*/artifact | tail -1)
kevlike decide examples/review.json --model "$artifact" --timing --compact 2>&1 | tee "$OUT/decide.log"
echo "gpu_check: done in $(( $(date +%s) - start )) s; results in $OUT"
