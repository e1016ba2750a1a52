"""The branch mask_mod vs an independent numpy reference, exactly, at awkward lengths (PITFALLS #2, #3)."""

import numpy as np
import pytest
import torch

from kevlike.model.kernels import (block_mask, dense_mask, packed_mask_mod, reference_block_reduce, reference_mask)
from kevlike.model.kernels.masks import branch_rows_mask

LENGTHS = [1, 127, 129, 137, 2046]


def random_layout(L: int, seed: int, pad: int = 0):
    """segment_ids / position_ids ``[1, L]`` for a state and random branches, ``pad`` trailing padding."""
    g = np.random.default_rng(seed)
    real = L - pad
    S = int(g.integers(1, max(2, real // 3 + 1))) if real > 0 else 0
    S = min(S, real)
    seg = [0] * S
    pos = list(range(S))
    k = 0
    while len(seg) < real:
        k += 1
        n = int(min(real - len(seg), g.integers(1, max(2, real // 4 + 2))))
        seg += [k] * n
        pos += list(range(S, S + n))
    seg += [-1] * pad
    pos += [0] * pad
    return torch.tensor([seg]), torch.tensor([pos])


def option_layout(seg: torch.Tensor, seed: int) -> torch.Tensor:
    """option_ids ``[1, L]``: in each branch, the tail after a random prompt split into 1–3 sub-branches."""
    g = np.random.default_rng(seed)
    s = seg[0].tolist()
    opt = [0] * len(s)
    for k in set(s) - {0, -1}:
        idx = [i for i, v in enumerate(s) if v == k]
        cut = int(g.integers(0, len(idx)))
        tail = idx[cut:]
        n = int(g.integers(1, 4))
        for j, i in enumerate(tail):
            opt[i] = 1 + j * n // max(1, len(tail))
    return torch.tensor([opt])


@pytest.mark.parametrize("L", LENGTHS)
@pytest.mark.parametrize("window", [None, 5])
def test_dense_mask_equals_reference(L, window):
    pad = L // 10
    seg, pos = random_layout(L, seed=L, pad=pad)
    got = dense_mask(seg, pos, window)
    assert got.shape == (1, 1, L, L) and got.dtype == torch.bool
    ref = reference_mask(seg.numpy(), pos.numpy(), window)
    assert np.array_equal(got[:, 0].numpy(), ref)
    assert got.any(-1).all(), "every row (padding included) attends somewhere: no NaN softmax rows"


@pytest.mark.parametrize("L", LENGTHS)
def test_dense_mask_with_option_sub_branches_equals_reference(L):
    seg, pos = random_layout(L, seed=L + 2, pad=L // 9)
    opt = option_layout(seg, seed=L)
    assert L < 100 or (opt > 1).any()
    got = dense_mask(seg, pos, None, opt)
    assert np.array_equal(got[:, 0].numpy(), reference_mask(seg.numpy(), pos.numpy(), None, opt.numpy()))
    bm = block_mask(seg, pos, None, opt)
    ref = reference_block_reduce(reference_mask(seg.numpy(), pos.numpy(), None, opt.numpy()))
    assert np.array_equal(bm.to_dense()[:, 0].bool().numpy(), ref)


@pytest.mark.parametrize("L", [40, 200])
def test_branch_rows_mask_is_the_packed_masks_branch_rows(L):
    """The state cache's broadcast form equals the mask_mod's rows for the branch tokens (state first,
    no padding), option sub-branches included."""
    seg, pos = random_layout(L, seed=L + 7)
    opt = option_layout(seg, seed=L + 1)
    S = int((seg[0] == 0).sum())
    full = dense_mask(seg, pos, None, opt)
    assert torch.equal(branch_rows_mask(S, seg[0, S:], opt[0, S:]), full[:, :, S:])


def test_option_sub_branches_by_hand():
    # state 1 token; branch 1: prompt 2 tokens, answer 1 (2 tokens), answer 2 (1 token), then a
    # question-level token (option 0) after the answers that reads them all
    seg = torch.tensor([[0, 1, 1, 1, 1, 1, 1]])
    opt = torch.tensor([[0, 0, 0, 1, 1, 2, 0]])
    m = dense_mask(seg, option_ids=opt)[0, 0].int().tolist()
    assert m == [
        [1, 0, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0, 0],
        [1, 1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 1, 0, 0],
        [1, 1, 1, 0, 0, 1, 0],   # answer 2 does not see answer 1
        [1, 1, 1, 1, 1, 1, 1],   # a question-level token after the options reads them all
    ]


@pytest.mark.parametrize("L", LENGTHS)
def test_block_mask_equals_block_reduced_reference(L):
    seg, pos = random_layout(L, seed=L + 1, pad=L // 7)
    bm = block_mask(seg, pos)
    ref = reference_block_reduce(reference_mask(seg.numpy(), pos.numpy()))
    assert np.array_equal(bm.to_dense()[:, 0].bool().numpy(), ref)


def test_mask_values_on_hand_layout():
    # state of 2, branch 1 of 2, branch 2 of 1, one padding token
    seg = torch.tensor([[0, 0, 1, 1, 2, -1]])
    m = dense_mask(seg)[0, 0].int().tolist()
    assert m == [
        [1, 0, 0, 0, 0, 0],
        [1, 1, 0, 0, 0, 0],
        [1, 1, 1, 0, 0, 0],
        [1, 1, 1, 1, 0, 0],
        [1, 1, 0, 0, 1, 0],   # branch 2 sees the state and itself, not branch 1
        [0, 0, 0, 0, 0, 1],   # padding: itself only
    ]


def test_sliding_window_uses_restarted_positions():
    # state 0..2, branch 1 at positions 3..4, branch 2 at positions 3..4 (packed indices 5..6)
    seg = torch.tensor([[0, 0, 0, 1, 1, 2, 2]])
    pos = torch.tensor([[0, 1, 2, 3, 4, 3, 4]])
    m = dense_mask(seg, pos, window=3)[0, 0]
    # last token of branch 2 (pos 4) sees pos 2,3,4: state index 2 and its own two tokens;
    # on packed indices it would have seen nothing of the state.
    assert m[6].nonzero().flatten().tolist() == [2, 5, 6]
    assert m[4].nonzero().flatten().tolist() == [2, 3, 4]


def test_mask_mod_never_reads_past_the_real_length():
    # create_block_mask evaluates the mask on the padded tail of the last tile: this must not index out of range
    seg = torch.zeros((1, 129), dtype=torch.long)
    mod = packed_mask_mod(seg)
    q = torch.tensor(255)
    assert bool(mod(torch.tensor(0), torch.tensor(0), q, q))  # tail reads as padding: attends to itself


def test_backend_and_mask_type_never_mix():
    from transformers import LlamaConfig

    from kevlike.model.kernels import attention_mask_for

    seg = torch.tensor([[0, 0, 1, 2]])
    pos = torch.tensor([[0, 1, 2, 2]])
    cfg = LlamaConfig()
    dense = attention_mask_for("sdpa", cfg, seg, pos)
    assert isinstance(dense, torch.Tensor) and dense.dtype == torch.bool and dense.shape == (1, 1, 4, 4)
    from torch.nn.attention.flex_attention import BlockMask

    assert isinstance(attention_mask_for("flex_attention", cfg, seg, pos), BlockMask)
    with pytest.raises(ValueError, match="eager"):
        attention_mask_for("eager", cfg, seg, pos)


def test_dense_mask_in_row_chunks_equals_reference():
    """Long requests materialise the mask in blocks of query rows (bounded memory): same result."""
    seg, pos = random_layout(1000, seed=7, pad=37)
    opt = option_layout(seg, seed=7)
    whole = dense_mask(seg, pos, 5, opt)
    chunked = dense_mask(seg, pos, 5, opt, chunk_elements=1000 * 97)  # 97 rows per block, uneven tail
    assert torch.equal(whole, chunked)
    assert np.array_equal(chunked[:, 0].numpy(), reference_mask(seg.numpy(), pos.numpy(), 5, opt.numpy()))
