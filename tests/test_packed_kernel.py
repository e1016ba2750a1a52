"""The block-sparse CPU kernel (``kevlike_packed``) against the dense-mask reference: the attention
function alone on random tensors (GQA, left/right padding, uneven branches), and whole models."""

import pytest
import torch
import torch.nn.functional as F

from kevlike.model.kernels import dense_mask
from kevlike.model.kernels.block_sparse import PackedLayout, packed_attention
from kevlike.request.pack import pack
from kevlike.request.schema import validate_request

from tiny import REQUEST, make_engine, max_dp


def segments(rows, L):
    """rows: list of (left_pad, state_len, [branch lens]) -> segment_ids [B, L] (-1 padding)."""
    out = torch.full((len(rows), L), -1, dtype=torch.long)
    for b, (off, S, lens) in enumerate(rows):
        seg = [0] * S + [k + 1 for k, n in enumerate(lens) for _ in range(n)]
        out[b, off:off + len(seg)] = torch.tensor(seg)
    return out


def reference(q, k, v, seg):
    mask = dense_mask(seg)                                               # (B, 1, L, L) bool
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2)


@pytest.mark.parametrize("rows", [
    [(0, 7, [3, 5, 1])],                                  # right padding none, uneven branches
    [(0, 1, [4])],                                        # state of one token
    [(0, 9, [2, 6]), (4, 5, [1, 1, 3])],                  # batch, second row left padded
    [(0, 30, [11, 2, 7, 9]), (0, 12, [5])],              # second row right padded
])
def test_packed_attention_equals_dense_mask(rows):
    torch.manual_seed(0)
    L = max(off + S + sum(lens) for off, S, lens in rows) + 2
    seg = segments(rows, L)
    B, H, Hkv, d = len(rows), 4, 2, 16
    q, k, v = torch.randn(B, H, L, d), torch.randn(B, Hkv, L, d), torch.randn(B, Hkv, L, d)
    out, _ = packed_attention(None, q, k, v, scaling=d ** -0.5, packed_layout=PackedLayout.from_segments(seg))
    ref = reference(q, k, v, seg)
    real = (seg != -1)
    assert out.shape == (B, L, H, d)
    assert (out[real] - ref[real]).abs().max().item() <= 1e-5
    assert (out[~real] == 0).all()  # padding rows are never read; the kernel leaves them 0


def test_layout_reads_the_segments():
    seg = segments([(2, 3, [2, 4])], 12)
    row = PackedLayout.from_segments(seg).rows[0]
    assert (row.state_start, row.state_end, row.branch_end) == (2, 5, 11)
    assert [g.tolist() for g in row.gather] == [[[0, 1]], [[2, 3, 4, 5]]]     # grouped by length
    assert row.scatter.tolist() == [0, 1, 2, 3, 4, 5]
    row = PackedLayout.from_segments(segments([(0, 1, [3, 4, 1])], 9)).rows[0]
    assert [g.tolist() for g in row.gather] == [[[7]], [[0, 1, 2, 2], [3, 4, 5, 6]]]
    assert row.scatter.tolist() == [1, 2, 3, 5, 6, 7, 8, 0]


def test_layout_refuses_interleaved_branches():
    seg = torch.tensor([[0, 0, 1, 2, 1]])
    with pytest.raises(ValueError, match="back to back"):
        PackedLayout.from_segments(seg)


def test_kernel_is_inference_only():
    q = torch.randn(1, 2, 4, 8, requires_grad=True)
    k = v = torch.randn(1, 2, 4, 8)
    layout = PackedLayout.from_segments(torch.tensor([[0, 0, 1, 1]]))
    with pytest.raises(ValueError, match="inference only"):
        packed_attention(None, q, k, v, packed_layout=layout)
    with pytest.raises(ValueError, match="packed_layout"):
        packed_attention(None, q.detach(), k, v, torch.empty(1, 1, 0, 0, dtype=torch.bool))


@pytest.mark.parametrize("arch", ["qwen2", "llama"])
@pytest.mark.parametrize("side", ["right", "left"])
def test_model_logits_kernel_equals_sdpa(arch, side):
    """Whole tiny models, a padded batch of two requests: kevlike_packed == sdpa with the dense mask."""
    small = {"state": "The lazy dog.", "questions": {"q": {"type": "noul", "instructions": "Is a dog mentioned?"}}}
    out = {}
    for backend in ("sdpa", "kevlike_packed"):
        eng = make_engine(arch, "pointer", backend=backend)
        encs = [eng.encode(validate_request(r)) for r in (REQUEST, small)]
        out[backend] = eng.question_logits(encs, padding_side=side)
    for ra, rb in zip(out["sdpa"], out["kevlike_packed"]):
        for za, zb in zip(ra, rb):
            assert torch.allclose(za, zb, atol=1e-5), (za, zb)
    assert max(z.abs().max().item() for z in out["sdpa"][0]) > 1e-3  # not trivially zero


def test_engine_defaults_to_the_kernel_on_cpu_also_for_sub_branches():
    eng = make_engine("llama", "lm")           # LM readout: option sub-branches, covered by the kernel too
    assert eng.backend == "kevlike_packed"
    ref = make_engine("llama", "lm", backend="sdpa")
    assert max_dp(eng.decide(REQUEST), ref.decide(REQUEST)) <= 1e-5


def test_long_request_allocates_no_square_mask():
    """A 32k-token row (a 32k-token state would be too slow here: 64 branches after a 30k state)
    goes through the kernel with a peak far below one L² bool mask (1 GiB)."""
    from kevlike.eval.bench import PeakRSS

    L = 32768
    seg = segments([(0, L - 64 * 32, [32] * 64)], L)
    q = torch.randn(1, 1, L, 8)
    k = v = torch.randn(1, 1, L, 8)
    with PeakRSS() as mem:
        before = mem.peak
        layout = PackedLayout.from_segments(seg)
        out, _ = packed_attention(None, q, k, v, packed_layout=layout)
    assert out.shape == (1, L, 1, 8) and torch.isfinite(out).all()
    assert (mem.peak - before) / 2**20 < 256


def _with_options(rows, L):
    """rows: list of (left_pad, state_len, [(prompt_len, [sub lens])]) -> (segment_ids, option_ids) [B, L]."""
    seg = torch.full((len(rows), L), -1, dtype=torch.long)
    opt = torch.zeros((len(rows), L), dtype=torch.long)
    for b, (off, S, branches) in enumerate(rows):
        s, o = [0] * S, [0] * S
        for k, (n, subs) in enumerate(branches):
            s += [k + 1] * (n + sum(subs))
            o += [0] * n + [j + 1 for j, m in enumerate(subs) for _ in range(m)]
        seg[b, off:off + len(s)] = torch.tensor(s)
        opt[b, off:off + len(o)] = torch.tensor(o)
    return seg, opt


@pytest.mark.parametrize("rows", [
    [(0, 7, [(3, [2, 4, 1])])],                                   # one set-mode branch
    [(0, 9, [(4, []), (2, [3, 3]), (5, [1])]), (3, 5, [(2, [1, 2, 6])])],   # mixed branches, left padding
])
def test_packed_attention_with_option_sub_branches_equals_dense_mask(rows):
    torch.manual_seed(0)
    L = max(off + S + sum(n + sum(subs) for n, subs in br) for off, S, br in rows) + 1
    seg, opt = _with_options(rows, L)
    B, H, Hkv, d = len(rows), 4, 2, 16
    q, k, v = torch.randn(B, H, L, d), torch.randn(B, Hkv, L, d), torch.randn(B, Hkv, L, d)
    layout = PackedLayout.from_segments(seg, opt)
    out, _ = packed_attention(None, q, k, v, scaling=d ** -0.5, packed_layout=layout)
    mask = dense_mask(seg, option_ids=opt)
    kk, vv = k.repeat_interleave(2, 1), v.repeat_interleave(2, 1)
    ref = F.scaled_dot_product_attention(q, kk, vv, attn_mask=mask).transpose(1, 2)
    real = seg != -1
    assert (out[real] - ref[real]).abs().max().item() <= 1e-5


def test_layout_refuses_question_tokens_after_options():
    seg = torch.tensor([[0, 0, 1, 1, 1, 1]])
    opt = torch.tensor([[0, 0, 0, 1, 1, 0]])
    with pytest.raises(ValueError, match="after option sub-branches"):
        PackedLayout.from_segments(seg, opt)


def test_set_mode_engine_runs_the_packed_kernel_and_equals_sdpa():
    packed = make_engine("qwen2", option_mode="set", backend="kevlike_packed")
    sdpa = make_engine("qwen2", option_mode="set", backend="sdpa")
    enc = packed.encode(validate_request(REQUEST))
    batch = pack([enc], packed.encoder.pad_id)
    from kevlike.model.kernels import attention_inputs

    assert "packed_layout" in attention_inputs("kevlike_packed", packed.model.config, batch.segment_ids,
                                               batch.position_ids, batch.option_ids)
    a, b = packed.question_logits([enc])[0], sdpa.question_logits([enc])[0]
    for x, y in zip(a, b):
        assert torch.allclose(x, y, atol=1e-5)


def test_kernel_runs_under_cpu_autocast_as_sdpa_does():
    """Under ``torch.autocast("cpu", bfloat16)`` the rotary embedding leaves query/key float32 beside a bfloat16
    value; the kernel (one flash op, one dtype) used to raise "expected scalar type Float but found BFloat16".
    It now runs in the autocast dtype as sdpa does: both land within bfloat16 rounding of the float32 logits."""
    out = {}
    for backend in ("sdpa", "kevlike_packed"):
        eng = make_engine("qwen2", "pointer", backend=backend)
        enc = eng.encode(validate_request(REQUEST))
        out[backend + "32"] = eng.question_logits([enc])[0]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out[backend] = eng.question_logits([enc])[0]

    def gap(x, y):
        return max((a - b).abs().max().item() for a, b in zip(out[x], out[y]))

    assert gap("sdpa32", "kevlike_packed32") <= 1e-5
    assert 0 < gap("sdpa", "sdpa32") <= 2e-2                        # autocast did act: bfloat16 rounding
    assert gap("kevlike_packed", "sdpa32") <= 2 * gap("sdpa", "sdpa32") + 1e-3
