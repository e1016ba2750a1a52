"""The merged-model cache (kevlike/model/merged.py): a cached load answers with the same floats as a merge through
peft, it is keyed by what the merge reads, it can be turned off, and an unwritable cache never fails a load."""

import json

import pytest
import torch

from kevlike import Engine
from kevlike.model import merged
from kevlike.model.modeldir import save_decision_model

from tiny import REQUEST, make_engine


@pytest.fixture
def artifact(tmp_path, monkeypatch):
    """A tiny Qwen2 decision model with a LoRA adapter whose B matrices are random (a fresh adapter merges to
    nothing), trained-looking delimiter rows, and ``$KEVLIKE_HOME`` in ``tmp_path``."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer

    monkeypatch.setenv("KEVLIKE_HOME", str(tmp_path / "home"))
    monkeypatch.delenv(merged.ENV, raising=False)
    tiny = make_engine("qwen2", "pointer")
    backbone = tmp_path / "backbone"
    tiny.model.save_pretrained(backbone)
    tiny.encoder.tokenizer.save_pretrained(backbone)
    eng = Engine(tiny.model, AutoTokenizer.from_pretrained(backbone), head=tiny.head, threads=1)
    ids = list(eng.encoder.delimiter_ids)
    torch.manual_seed(3)
    with torch.no_grad():
        eng.model.get_input_embeddings().weight[ids] = torch.randn(5, eng.model.config.hidden_size)
    peft_model = get_peft_model(eng.model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(std=0.5)
    art = save_decision_model(tmp_path / "model", backbone=str(backbone), model=peft_model,
                              tokenizer=eng.encoder.tokenizer, head=eng.head, adapter=peft_model)
    return art, backbone, tmp_path / "home" / "merged"


def _entries(root):
    return sorted(p for p in root.iterdir() if not p.name.startswith(".")) if root.exists() else []


def test_cached_load_answers_the_same_floats(artifact):
    art, _backbone, root = artifact
    first = Engine.from_pretrained(art, dtype="float32", threads=1)          # merges through peft, writes the cache
    (entry,) = _entries(root)
    assert json.loads((entry / merged.STAMP).read_text())["artifact"] == str(art)
    second = Engine.from_pretrained(art, dtype="float32", threads=1)         # reads the cache: no peft
    for (n1, p1), (n2, p2) in zip(first.model.state_dict().items(), second.model.state_dict().items()):
        assert n1 == n2 and torch.equal(p1, p2), n1
    assert torch.equal(first.head.w_q.weight, second.head.w_q.weight)
    a, b = first.decide(REQUEST), second.decide(REQUEST)
    assert a["answers"] == b["answers"]
    # the adapter changed the weights: the cache holds a merge, not the bare backbone
    bare = Engine.from_pretrained(artifact[1], dtype="float32", threads=1)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(bare.model.state_dict()[q], second.model.state_dict()[q])


def test_key_covers_adapter_precision_and_backbone(artifact):
    art, backbone, _root = artifact
    k = merged.cache_key(art, backbone, "float32")
    assert len(k) == 64 and k == merged.cache_key(art, backbone, "float32")
    assert merged.cache_key(art, backbone, "bfloat16") != k
    weights = art / "adapter" / "adapter_model.safetensors"
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1                                                           # one bit of one LoRA weight
    weights.write_bytes(bytes(data))
    assert merged.cache_key(art, backbone, "float32") != k
    weights.write_bytes(bytes(data[:-1]) + bytes([data[-1] ^ 1]))
    assert merged.cache_key(art, backbone, "float32") == k
    cfg = backbone / "config.json"
    cfg.write_text(cfg.read_text() + " ")                                   # a re-fetched backbone (size changes)
    assert merged.cache_key(art, backbone, "float32") != k


def test_cache_off_writes_nothing(artifact, monkeypatch):
    art, _backbone, root = artifact
    monkeypatch.setenv(merged.ENV, "off")
    assert not merged.cache_enabled()
    eng = Engine.from_pretrained(art, dtype="float32", threads=1)
    assert _entries(root) == [] and eng.decide(REQUEST)["answers"]


def test_unwritable_cache_is_a_notice_not_an_error(artifact, monkeypatch, capsys, tmp_path):
    art, _backbone, _root = artifact
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("KEVLIKE_HOME", str(blocker))
    eng = Engine.from_pretrained(art, dtype="float32", threads=1)
    assert eng.decide(REQUEST)["answers"]
    err = capsys.readouterr().err
    assert "merged-model cache not written" in err and merged.ENV in err


def test_incomplete_entry_is_ignored_and_replaced(artifact):
    art, backbone, root = artifact
    key = merged.cache_key(art, backbone, "float32")
    entry = merged.cache_dir(key)
    entry.mkdir(parents=True)
    (entry / "config.json").write_text("{}")                                # an interrupted write: no stamp
    eng = Engine.from_pretrained(art, dtype="float32", threads=1)
    assert json.loads((entry / merged.STAMP).read_text())["key"] == key
    assert eng.decide(REQUEST)["answers"]


def test_only_the_most_recently_used_entries_are_kept(artifact, monkeypatch):
    art, backbone, root = artifact
    monkeypatch.setattr(merged, "KEEP", 1)
    Engine.from_pretrained(art, dtype="float32", threads=1)
    Engine.from_pretrained(art, dtype="bfloat16", threads=1)                # another precision: another entry
    (entry,) = _entries(root)
    assert entry == merged.cache_dir(merged.cache_key(art, backbone, "bfloat16"))
