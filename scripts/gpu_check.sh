#!/usr/bin/env bash
# The GPU path in one call, on a machine with one CUDA GPU (within ten minutes; `kevlike gpu-check --help`):
#   1. flex == sdpa answers of the real model (fp32), and packed == separate under flex;
#   2. flex == sdpa training gradients (LoRA, delimiter rows, head) on a tiny random Llama;
#   3. a short run of the default recipe (configs/default.yaml, 20 steps, attention auto = flex on CUDA);
#   4. kevlike bench rows (packed flex vs sdpa vs separate vs prefix cache vs cached state);
#   5. kevlike loadtest --spawn at 1-64 concurrent clients.
# Needs the project installed and, for steps 1, 3-5, the embedded backbone set up (kevlike fetch) and, for step 3,
# the data packages (docs/guide/gpu.md says how to carry them). Results: $OUT (default runs/gpu-check)/gpu_check.json
# and report.md. Without a CUDA GPU it prints one line and exits 1. Extra arguments go to kevlike gpu-check.
set -uo pipefail
cd "$(dirname "$0")/.."
if command -v kevlike >/dev/null; then run=(kevlike); else run=(python -m kevlike); fi
exec timeout 600 "${run[@]}" gpu-check --out "${OUT:-runs/gpu-check}" "$@"
