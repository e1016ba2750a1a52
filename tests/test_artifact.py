"""Decision-model directory: save → load restores the head and delimiter rows bit for bit (PITFALLS #7, #8)."""

import json

import pytest
import torch

from kevlike import Engine
from kevlike.model.modeldir import save_decision_model
from kevlike.model.temperatures import TemperatureTable

from tiny import REQUEST, make_engine

ROOT = __import__("pathlib").Path(__file__).resolve().parents[1]


def test_save_load_round_trip(tmp_path):
    from transformers import AutoTokenizer

    tiny = make_engine("qwen2", "pointer")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    # the tokenizer class AutoTokenizer picks for a saved Qwen2 directory (it re-derives the
    # pre-tokenizer), so both engines tokenize alike
    eng = Engine(tiny.model, AutoTokenizer.from_pretrained(backbone), head=tiny.head)
    # "train" the delimiter rows and the head so a fresh random init cannot pass
    ids = list(eng.encoder.delimiter_ids)
    with torch.no_grad():
        eng.model.get_input_embeddings().weight[ids] = torch.randn(5, eng.model.config.hidden_size)
        eng.head.w_q.weight.mul_(3.0)
    temps = TemperatureTable(by_bucket={("choice", "3-5"): 1.7}, by_type={"noul": 0.8}, source="test")
    eng.temperatures = temps
    art = save_decision_model(tmp_path / "model", backbone=str(backbone), model=eng.model,
                              tokenizer=eng.encoder.tokenizer, head=eng.head, temperatures=temps)
    assert json.loads((art / "kevlike.json").read_text())["delimiter_ids"] == ids

    loaded = Engine.from_pretrained(art)
    assert loaded.readout.name == "pointer" and loaded.name == str(art)
    assert torch.equal(loaded.head.w_q.weight, eng.head.w_q.weight)
    assert torch.equal(loaded.head.w_k.weight, eng.head.w_k.weight)
    assert torch.equal(loaded.model.get_input_embeddings().weight[ids], eng.model.get_input_embeddings().weight[ids])
    assert loaded.temperatures.lookup("choice", 3) == 1.7 and loaded.temperatures.lookup("noul", 2) == 0.8
    a, b = eng.decide(REQUEST), loaded.decide(REQUEST)
    assert a["answers"] == b["answers"]


def test_temperature_applies_to_logits():
    eng = make_engine("llama", "pointer")
    base = eng.decide(REQUEST)["answers"]["team"]["probabilities"]
    eng.temperatures = TemperatureTable(by_type={"choice": 2.0})
    hot = eng.decide(REQUEST)["answers"]["team"]["probabilities"]
    z = torch.log(torch.tensor(list(base.values()), dtype=torch.float64))
    want = torch.softmax(z / 2.0, -1)
    assert list(hot.values()) == pytest.approx(want.tolist(), abs=1e-6)


LFS_TEXT = (b"version https://git-lfs.github.com/spec/v1\n"
            b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 9548\n")


def _model_copy(tmp_path):
    import shutil
    from pathlib import Path

    import kevlike

    src = Path(kevlike.__file__).parent / "models" / "default"
    return Path(shutil.copytree(src, tmp_path / "model"))


@pytest.mark.parametrize("name", ["head.safetensors", "adapter/adapter_model.safetensors", "kevlike.json"])
def test_lfs_pointer_in_a_model_directory_is_one_clear_error(tmp_path, name):
    """A clone without git-lfs leaves ~130-byte pointer files: one line naming the file and the cause,
    before any parser sees it (it used to end in safetensors' "header too large")."""
    import subprocess
    import sys

    from kevlike.model.backbones import SetupError, check_model_files

    model = _model_copy(tmp_path)
    (model / name).write_bytes(LFS_TEXT)
    with pytest.raises(SetupError, match=r"is a Git LFS pointer file \(129 bytes\).*git lfs pull"):
        check_model_files(model, "run `git lfs pull`")
    r = subprocess.run([sys.executable, "-m", "kevlike", "decide", "examples/review.json", "--model", str(model)],
                       capture_output=True, text=True, cwd=str(ROOT))
    assert r.returncode == 1 and r.stdout == ""
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kevlike: error: ") and name.split("/")[-1] in lines[0]


def test_truncated_safetensors_is_named(tmp_path):
    from kevlike.model.backbones import SetupError, check_model_files

    model = _model_copy(tmp_path)
    data = (model / "delimiters.safetensors").read_bytes()
    (model / "delimiters.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(SetupError, match=r"delimiters.safetensors is truncated"):
        check_model_files(model, "copy it again")
    check_model_files(_model_copy(tmp_path / "fresh"), "-")      # the shipped directory passes
