"""A training config's own validation round (``validate()`` of kevlike/training/train.py: the config's validation
tasks, n and seed) on a finished decision model: the figure a run's metrics.jsonl would show at its step 0.

    python experiments/own_validation.py configs/qwen2.yaml kevlike-qwen

Result in docs/results/stage20/README.md (the shipped kevlike-qwen on qwen2.yaml's 349 items: NLL 0.645).
Float32 without autocast (the trainer validates under bf16 autocast on CPUs with bf16 units: expect small
differences)."""
import json
import sys

import torch

from kevlike import Engine
from kevlike.config.engine import EngineOptions
from kevlike.training.config import load_config
from kevlike.training.train import validate, validation_set

torch.set_num_threads(1)
config, model = sys.argv[1], sys.argv[2]
cfg = load_config(config, [])
examples = validation_set(cfg)
engine = Engine.from_pretrained(model, EngineOptions(dtype="float32", threads=1), option_mode="list")
# the same weights in set mode, as the trainer's validation and kevlike calibrate do (loaded once)
set_engine = (Engine(engine.model, engine.encoder.tokenizer, name=engine.name, head=engine.head,
                     backend=engine.backend, option_mode="set") if cfg.set_share > 0 else None)
overall = validate(engine, examples, set_engine=set_engine)["overall"]
print(json.dumps({"n": overall["n"], "accuracy": overall["accuracy"], "nll": overall["nll"], "ece": overall["ece"],
                  "abstain_nll": (overall.get("abstention") or {}).get("nll")}))
