"""The training config as a frozen dataclass (kevlike/config/train.py): it checks itself on construction, names
the refused field, cannot be changed in place, and reads back what it wrote (configs/, run directories)."""

import copy
import math
import pickle
import subprocess
import sys
from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest
import yaml

from kevlike.config.rules import ConfigError
from kevlike.config.train import DataFile, LossConfig, OptimConfig, TrainConfig
from kevlike.training.config import load_config, load_run_config, save_run_config

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))

# the defaults every saved config.yaml and manifest was written over (kevlike/training/config.py's DEFAULTS before
# the config became a dataclass): a change here changes what `kevlike train` saves
DEFAULTS = {
    "name": "run", "backbone": "smollm2-135m-instruct", "init_from": None, "seed": 0, "output_dir": "runs",
    "device": None, "mixed_precision": "auto", "attention": "auto",
    "lora": {"r": 16, "alpha": 32, "dropout": 0.0,
             "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]},
    "head": {"d_head": None, "scale_init": True, "abstain": False},
    "readout": "pointer",                                                 # added with stage 35; older saves lack it
    "train_delimiters": True, "phase": "full",
    "tasks": {"banking77": {"weight": 1.0, "negatives": 23, "full_set": 0.0, "perm_twin": 0.25, "irrelevant": 0.1,
                            "noul_twins": 1},
              "spam": {"weight": 0.2}, "sentiment": {"weight": 0.3}},
    "loss": {"perm": 0.5, "ord": 1.0, "readout": 0.0, "abstain": 0.0},
    "distill": {"teacher": None, "weight": 0.0, "dtype": "auto"},     # added with stage 33; older saves lack it
    "data": [], "stream": None, "set_share": 0.0,
    "optim": {"lr": 3e-4, "head_lr": 1e-3, "weight_decay": 0.01, "warmup": 0.1, "grad_clip": 1.0},
    "batch_size": 4, "grad_accum": 1, "max_steps": 1000, "max_minutes": None, "stop_after": None, "eval_every": 200,
    "validation": {"n": 48, "tasks": None, "data": None, "seed": None},
    "patience": 3, "checkpoint_every": 100, "recompute_above": 2048,
}


def test_the_defaults_are_the_saved_ones_key_for_key_and_in_order():
    d = TrainConfig().to_dict()
    assert d == DEFAULTS
    assert list(d) == list(DEFAULTS) and list(d["optim"]) == list(DEFAULTS["optim"])
    assert yaml.safe_dump(d, sort_keys=False) == yaml.safe_dump(DEFAULTS, sort_keys=False)


def test_a_nan_learning_rate_is_refused_naming_optim_lr():
    message = "optim.lr must be a finite number ≥ 0, got nan"
    with pytest.raises(ConfigError) as e:
        TrainConfig.from_dict({"optim": {"lr": math.nan}})
    assert str(e.value) == message
    with pytest.raises(ConfigError, match="^optim.lr must be a finite number ≥ 0, got nan$"):
        OptimConfig(lr=math.nan)
    with pytest.raises(ConfigError, match="^optim.lr must be a finite number ≥ 0, got inf$"):
        replace(TrainConfig().optim, lr=math.inf)                   # replace checks too
    with pytest.raises(ConfigError, match="^optim.grad_clip must be a finite number > 0, got 0$"):
        TrainConfig(optim={"grad_clip": 0})
    with pytest.raises(ConfigError, match=f"^{message}$"):
        load_config(None, ["optim.lr=.nan"])


def test_a_wrong_type_is_refused_naming_the_field():
    with pytest.raises(ConfigError) as e:
        TrainConfig(max_steps="1000")
    assert str(e.value) == "max_steps must be an integer ≥ 1, got '1000'"
    with pytest.raises(ConfigError, match=r"^max_steps must be an integer ≥ 1, got 10\.0$"):
        TrainConfig.from_dict({"max_steps": 10.0})
    with pytest.raises(ConfigError, match=r"^lora.r must be an integer ≥ 1, got True$"):
        TrainConfig.from_dict({"lora": {"r": True}})
    with pytest.raises(ConfigError, match=r"^head.abstain must be true or false, got 'yes'$"):
        TrainConfig.from_dict({"head": {"abstain": "yes"}})
    with pytest.raises(ConfigError, match=r"^lora must be a mapping of r, alpha, dropout, target_modules, got 5$"):
        TrainConfig.from_dict({"lora": 5})
    with pytest.raises(ConfigError, match=r"^tasks.spam.weight must be a finite number ≥ 0, got '0.2'$"):
        TrainConfig(tasks={"spam": {"weight": "0.2"}})
    with pytest.raises(ConfigError, match=r"^unknown config key 'optim.lrr' \(known: grad_clip, head_lr, lr, warmup, "):
        TrainConfig.from_dict({"optim": {"lrr": 1}})
    with pytest.raises(ConfigError, match=r"^unknown config key 'tasks.spam.wieght' \(known: "):
        TrainConfig(tasks={"spam": {"wieght": 1}})
    with pytest.raises(ConfigError, match="^loss.abstain is 1 but head.abstain is false"):
        TrainConfig(loss=LossConfig(abstain=1))


def test_the_config_is_frozen():
    cfg = load_config(ROOT / "configs" / "default.yaml")
    with pytest.raises(FrozenInstanceError):
        cfg.max_steps = 5
    with pytest.raises(FrozenInstanceError):
        cfg.optim.lr = 1.0
    with pytest.raises(TypeError):
        cfg.tasks["spam"] = {"weight": 1.0}
    with pytest.raises(TypeError):
        cfg.tasks["spam"]["weight"] = 1.0
    assert cfg.lora.target_modules == ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
    assert pickle.loads(pickle.dumps(cfg)) == cfg and copy.deepcopy(cfg) == cfg      # a frozen config still travels
    assert hash(cfg) == hash(load_config(ROOT / "configs" / "default.yaml"))
    changed = replace(cfg, optim=replace(cfg.optim, lr=1e-4), max_steps=10)
    assert (changed.optim.lr, changed.max_steps, changed.optim.head_lr) == (1e-4, 10, 1e-3)
    assert (cfg.optim.lr, cfg.max_steps) == (3e-4, 800)             # the original is unchanged


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
def test_every_config_reads_back_what_it_writes(config):
    cfg = load_config(config)
    d = cfg.to_dict()
    assert TrainConfig.from_dict(d) == cfg
    assert TrainConfig.from_dict(d).to_dict() == d
    assert list(d) == list(DEFAULTS)
    assert yaml.safe_load(yaml.safe_dump(d, sort_keys=False)) == d   # plain YAML types: lists, dicts, scalars
    given = yaml.safe_load(config.read_text())
    for key in ("name", "seed", "max_steps", "batch_size"):          # the file's own values win over the defaults
        if key in given:
            assert d[key] == given[key], key
    if "tasks" in given:
        assert d["tasks"] == given["tasks"]


def test_default_yaml_resolves_to_its_values():
    cfg = load_config(ROOT / "configs" / "default.yaml")
    assert (cfg.name, cfg.batch_size, cfg.grad_accum, cfg.max_steps, cfg.max_minutes) == ("default", 1, 4, 800, 85)
    assert cfg.head.scale_init is False and cfg.head.d_head is None                  # head: {scale_init: false}
    assert cfg.validation.n == 24 and cfg.validation.seed is None                     # validation: {n: 24}
    assert cfg.optim.lr == 3e-4 and cfg.loss.abstain == 0.0
    assert list(cfg.tasks) == ["banking77", "clinc150", "spam", "sentiment"]
    assert dict(cfg.tasks["banking77"]) == {"weight": 0.45, "negatives": 23, "full_set": 0.05, "perm_twin": 0.25,
                                            "irrelevant": 0.1, "noul_twins": 1}
    assert cfg.task_weight("spam") == 0.1


def test_a_saved_run_config_reloads(tmp_path):
    cfg = load_config(ROOT / "configs" / "abstain.yaml", ["max_steps=7", "validation.seed=3"])
    path = save_run_config(cfg, tmp_path)
    assert path.read_text() == yaml.safe_dump(cfg.to_dict(), sort_keys=False)
    back = load_run_config(tmp_path)
    assert back == cfg
    assert (back.max_steps, back.validation.seed, back.phase, back.head.abstain) == (7, 3, "abstain", True)
    # a run started before attention, phase and the none key existed: those keys take their defaults
    old = cfg.to_dict()
    del old["attention"], old["phase"], old["head"]["abstain"], old["loss"]["abstain"]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(old, sort_keys=False))
    back = load_run_config(tmp_path)
    assert (back.attention, back.phase, back.head.abstain, back.loss.abstain) == ("auto", "full", False, 0.0)
    assert back.max_steps == 7 and back.tasks == cfg.tasks


def test_data_files_keep_the_keys_they_were_given(tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text("")
    cfg = load_config(None, [f"data=[{{path: {mine}}}, {{path: {mine}, weight: 2}}]"])
    assert cfg.data == (DataFile(str(mine)), DataFile(str(mine), 2))
    assert cfg.to_dict()["data"] == [{"path": str(mine)}, {"path": str(mine), "weight": 2}]
    with pytest.raises(ConfigError, match=r"^data\[0\].weight must be a finite number > 0, got None$"):
        TrainConfig.from_dict({"data": [{"path": "x.jsonl", "weight": None}]})
    with pytest.raises(ConfigError, match=r"^data\[1\] must be \{path: FILE.jsonl, weight: W\}, got \{'file': 'x'\}$"):
        TrainConfig.from_dict({"data": [{"path": "x.jsonl"}, {"file": "x"}]})


def test_the_config_package_imports_nothing_heavy():
    code = ("import sys, kevlike.config.train; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'numpy', 'yaml', 'pydantic') "
            "or (m.startswith('kevlike.') and not m.startswith('kevlike.config'))))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_the_docstring_lists_every_field_with_its_rule_and_default():
    doc = OptimConfig.__doc__
    assert "lr (a finite number ≥ 0; default 0.0003): peak learning rate of the LoRA matrices" in doc
    assert "grad_clip (a finite number > 0; default 1.0):" in doc
    assert "optim (:class:`OptimConfig`): the optimizer" in TrainConfig.__doc__


def test_a_resumed_run_drops_the_last_sessions_stop_after_and_keeps_its_budget(tmp_path):
    """``stop_after`` binds one session: a run saved with ``stop_after=50`` and ``max_minutes=100`` resumes without
    the stop (unless given again) and with the same ``max_minutes``; the recipe stays."""
    from kevlike.training.config import resume_config
    cfg = load_config(None, ["stop_after=50", "max_minutes=100", "optim.lr=3e-4"])
    save_run_config(cfg, tmp_path)
    back = resume_config(tmp_path)
    assert back.stop_after is None and back.max_minutes == 100 and back.optim.lr == 3e-4
    assert resume_config(tmp_path, ["stop_after=7"]).stop_after == 7
    assert resume_config(tmp_path, ["max_minutes=5"]).max_minutes == 5
