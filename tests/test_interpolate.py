"""kevlike soup (kevlike/training/soup.py): weight interpolation of two or more decision models (synthetic directories, no model)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from kevlike.training.soup import interpolate, soup  # noqa: E402


def _model(path: Path, seed: int, r: int = 4) -> Path:
    g = torch.Generator().manual_seed(seed)
    (path / "adapter").mkdir(parents=True)
    training = {"config": {"name": "facts", "seed": seed}, "git_commit": "c0ffee", "metrics": {"step": 20 * seed, "nll": 0.5}}
    (path / "kevlike.json").write_text(json.dumps({"backbone": "tiny", "backbone_sha256": "abc", "training": training}))
    (path / "adapter" / "adapter_config.json").write_text(json.dumps(
        {"r": r, "lora_alpha": 2 * r, "target_modules": ["q_proj", "v_proj"]}))
    save_file({"l.lora_A.weight": torch.randn(r, 6, generator=g), "l.lora_B.weight": torch.randn(6, r, generator=g)},
              str(path / "adapter" / "adapter_model.safetensors"))
    save_file({"w_q": torch.randn(6, 6, generator=g), "w_k": torch.randn(6, 6, generator=g)}, str(path / "head.safetensors"))
    save_file({"rows": torch.randn(5, 6, generator=g)}, str(path / "delimiters.safetensors"))
    (path / "calibration.json").write_text("{}")
    (path / "profiles").mkdir()
    (path / "profiles" / "ops.json").write_text("{}")
    (path / "MODEL_CARD.md").write_text(f"# model {seed}: the card of these weights only\n")
    return path


def test_interpolation_is_the_weighted_mean_of_every_trained_tensor(tmp_path):
    a, b = _model(tmp_path / "a", 0), _model(tmp_path / "b", 1)
    rel = interpolate(a, b, tmp_path / "m", 0.25)
    for name in ("adapter/adapter_model.safetensors", "head.safetensors", "delimiters.safetensors"):
        ta, tb, tm = (load_file(d / name) for d in (a, b, tmp_path / "m"))
        for k in ta:
            torch.testing.assert_close(tm[k], 0.75 * ta[k] + 0.25 * tb[k])
    la, lb = load_file(a / "adapter/adapter_model.safetensors"), load_file(b / "adapter/adapter_model.safetensors")
    want = (sum((lb[k] - la[k]).pow(2).sum() for k in la) / sum(la[k].pow(2).sum() for k in la)) ** 0.5
    assert rel == pytest.approx(float(want), rel=1e-6)
    manifest = json.loads((tmp_path / "m" / "kevlike.json").read_text())
    assert manifest["training"]["interpolation"] == {"models": [str(a), str(b)], "weights": [0.75, 0.25], "ingredients": [
        {"config": "facts", "seed": s, "git_commit": "c0ffee", "step": 20 * s, "validation_nll": 0.5} for s in (0, 1)]}
    cal = json.loads((tmp_path / "m" / "calibration.json").read_text())  # B's temperatures are not kept
    assert cal["by_type"] == {} and cal["source"].startswith("T = 1: interpolated (0.75·")
    assert not (tmp_path / "m" / "profiles").exists()                   # nor its profiles
    card = (tmp_path / "m" / "MODEL_CARD.md").read_text()               # nor A's card: one that lists the two
    assert "the card of these weights only" not in card
    assert f"| 0.75 | `{a}` | facts | 0 | 0 | 0.500 |" in card and f"| 0.25 | `{b}` | facts | 1 | 20 | 0.500 |" in card
    interpolate(a, b, tmp_path / "m1", 1.0)
    assert torch.equal(load_file(tmp_path / "m1" / "head.safetensors")["w_q"], load_file(b / "head.safetensors")["w_q"])


def test_models_that_do_not_match_are_refused_in_one_line(tmp_path):
    a, other = _model(tmp_path / "a", 0), _model(tmp_path / "c", 2, r=8)
    with pytest.raises(ValueError, match="different LoRA configuration: r = 4 and 8"):
        interpolate(a, other, tmp_path / "m", 0.5)
    with pytest.raises(ValueError, match=r"--alpha must be in \[0, 1\], got 1.5"):
        interpolate(a, a, tmp_path / "m", 1.5)
    p = subprocess.run([sys.executable, "-m", "kevlike", "soup", str(a), str(other), str(tmp_path / "m")],
                       capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr.startswith("kevlike: error: different LoRA configuration") and "Traceback" not in p.stderr
    assert not (tmp_path / "m").exists()
    with pytest.raises(ValueError, match="exists; choose a new directory"):
        interpolate(a, a, tmp_path / "a", 0.5)
    (a / "head.safetensors").unlink()                                     # a broken model: nothing is left behind
    with pytest.raises(ValueError, match="head.safetensors"):
        interpolate(a, _model(tmp_path / "b", 1), tmp_path / "m", 0.5)
    assert sorted(x.name for x in tmp_path.iterdir()) == ["a", "b", "c"]
    with pytest.raises(ValueError, match="not a decision-model directory"):
        interpolate(a, tmp_path / "nope", tmp_path / "m", 0.5)


def test_a_soup_of_three_is_their_weighted_mean_and_the_command_line_defaults_to_uniform(tmp_path):
    ms = [_model(tmp_path / n, s) for n, s in (("a", 0), ("b", 1), ("c", 2))]
    first = json.loads((ms[0] / "kevlike.json").read_text())
    (ms[0] / "kevlike.json").write_text(json.dumps({**first, "option_mode": "set", "option_orders": 1}))
    rel = soup(ms, [0.5, 0.3, 0.2], tmp_path / "s")
    ts = [load_file(m / "head.safetensors") for m in (*ms, tmp_path / "s")]
    torch.testing.assert_close(ts[3]["w_k"], 0.5 * ts[0]["w_k"] + 0.3 * ts[1]["w_k"] + 0.2 * ts[2]["w_k"])
    assert rel[0] == 0.0 and rel[1] == pytest.approx(interpolate(ms[0], ms[1], tmp_path / "ab", 1.0), rel=1e-6)
    manifest = json.loads((tmp_path / "s" / "kevlike.json").read_text())["training"]["interpolation"]
    assert manifest["models"] == [str(m) for m in ms] and manifest["weights"] == [0.5, 0.3, 0.2]
    assert [i["seed"] for i in manifest["ingredients"]] == [0, 1, 2] and manifest["ingredients"][2]["step"] == 40
    whole = json.loads((tmp_path / "s" / "kevlike.json").read_text())   # the first model's serving settings
    assert whole["option_mode"] == "set" and whole["option_orders"] == 1 and whole["training"]["config"]["seed"] == 0
    nested = soup([tmp_path / "s", ms[1]], [0.5, 0.5], tmp_path / "ss")  # a soup of a soup keeps the inner record
    assert nested[1] > 0
    inner = json.loads((tmp_path / "ss" / "kevlike.json").read_text())["training"]["interpolation"]["ingredients"]
    assert inner[0]["interpolation"] == manifest and "interpolation" not in inner[1]
    card = (tmp_path / "ss" / "MODEL_CARD.md").read_text()
    assert "| 0.5 | `%s` | a soup (0.5 facts seed 0, 0.3 facts seed 1, 0.2 facts seed 2) | | | |" % (tmp_path / "s") in card
    p = subprocess.run([sys.executable, "-m", "kevlike", "soup", *map(str, ms), str(tmp_path / "u")],
                       capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    u = load_file(tmp_path / "u" / "delimiters.safetensors")["rows"]
    torch.testing.assert_close(u, sum(load_file(m / "delimiters.safetensors")["rows"] for m in ms) / 3)
    for weights, msg in (([0.5, 0.5], "2 weights for 3 models"), ([0.7, 0.7, -0.4], "non-negative and sum to 1"),
                         ([0.5, 0.3, 0.3], "non-negative and sum to 1"),
                         ([float("nan")] * 3, "finite, non-negative and sum to 1")):   # NaN compares false
        with pytest.raises(ValueError, match=msg):
            soup(ms, weights, tmp_path / "bad")
    with pytest.raises(ValueError, match="at least two models"):
        soup(ms[:1], [1.0], tmp_path / "bad")
    p = subprocess.run([sys.executable, "-m", "kevlike", "soup", *map(str, ms), str(tmp_path / "bad"),
                        "--alpha", "0.5"], capture_output=True, text=True)
    assert p.returncode == 2 and p.stderr == "kevlike: error: --alpha needs exactly two models, got 3; use --weights\n"
    assert not (tmp_path / "bad").exists()


def test_a_head_without_the_none_key_counts_as_its_zero_init(tmp_path):
    """A soup of a model with x_abstain's none key and one without: the missing key is the zeros a fine-tune gaining
    it starts from, so the soup's key is the weighted one of the model that has it, and the capability is kept."""
    a, b = _model(tmp_path / "a", 0), _model(tmp_path / "b", 1)
    head = load_file(b / "head.safetensors")
    head.update(w_none=torch.arange(6.0), b_none=torch.tensor(2.0))
    save_file(head, str(b / "head.safetensors"))
    manifest = json.loads((b / "kevlike.json").read_text())
    (b / "kevlike.json").write_text(json.dumps({**manifest, "capabilities": ["x_abstain"]}))
    interpolate(a, b, tmp_path / "m", 0.25)
    tm = load_file(tmp_path / "m" / "head.safetensors")
    torch.testing.assert_close(tm["w_none"], 0.25 * torch.arange(6.0))
    torch.testing.assert_close(tm["b_none"], torch.tensor(0.5))
    torch.testing.assert_close(tm["w_q"], 0.75 * load_file(a / "head.safetensors")["w_q"] + 0.25 * head["w_q"])
    assert json.loads((tmp_path / "m" / "kevlike.json").read_text())["capabilities"] == ["x_abstain"]
    # half a key (w_none without b_none) is not a zero init: refused as different tensors
    save_file({**load_file(a / "head.safetensors"), "w_none": torch.zeros(6)}, str(a / "head.safetensors"))
    with pytest.raises(ValueError, match="head.safetensors: different tensors"):
        interpolate(a, b, tmp_path / "m2", 0.5)
