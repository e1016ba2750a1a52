"""Branch masks as pure ``mask_mod`` factories (DESIGN.md §6), with an independent dense reference.

The one definition of who may attend to whom (B requests, L packed tokens)::

    allowed(q, kv) = (seg[q] = -1 and kv = q)                                   padding: itself only
                   or (seg[q] != -1 and seg[kv] != -1 and kv <= q and (seg[kv] = 0 or seg[kv] = seg[q]))

and, for sliding-window layers, additionally ``pos[q] - pos[kv] < window`` on the *restarted*
position ids (so every branch gets the window of its separate run, whatever its packed offset).

One level down (sub-branches: the LM readout's answers, DESIGN §5 set mode), ``opt`` is o ≥ 1 on
the tokens of option o of a branch and 0 elsewhere; inside one branch a token additionally needs
``opt[kv] = 0 or opt[q] = 0 or opt[kv] = opt[q]``: an option sees the question text and itself,
never a sibling option, while a question-level token placed after the options may read them all.
Padding rows attend to themselves, so no row is fully masked (no NaN, PITFALLS.md #3).

A ``mask_mod`` has FlexAttention's signature ``(b, h, q_idx, kv_idx) -> bool``. The factories pad
the captured ``[B, L]`` tensors with padding (-1) up to a multiple of ``block_size``, because
``create_block_mask`` evaluates the mask on the padded tail of the last tile (PITFALLS.md #2).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch.nn.attention.flex_attention import and_masks, create_block_mask, create_mask, or_masks

BLOCK_SIZE = 128


def _padded(t: torch.Tensor, block_size: int, value: int) -> torch.Tensor:
    """[B, L] -> [B, L'] with L' the next multiple of ``block_size`` (filled with ``value``)."""
    extra = (-t.shape[-1]) % block_size
    return F.pad(t, (0, extra), value=value) if extra else t


def padding_self_mod(segment_ids: torch.Tensor, block_size: int = BLOCK_SIZE):
    """mask_mod: a padding query (segment -1) attends to itself only."""
    seg = _padded(segment_ids, block_size, -1)

    def padding_self(b, h, q_idx, kv_idx):
        return (seg[b, q_idx] == -1) & (q_idx == kv_idx)

    return padding_self


def branch_causal_mod(segment_ids: torch.Tensor, option_ids: torch.Tensor | None = None,
                      block_size: int = BLOCK_SIZE):
    """mask_mod: causal, and a branch token sees the state and its own branch only (and, with
    ``option_ids``, not a sibling option sub-branch).

    Args:
        segment_ids: ``[B, L]`` long, 0 = state, k ≥ 1 = branch k, -1 = padding.
        option_ids: ``[B, L]`` long or None, o ≥ 1 = option sub-branch o, 0 = state / question text.
    """
    seg = _padded(segment_ids, block_size, -1)
    if option_ids is None:
        def branch_causal(b, h, q_idx, kv_idx):
            sq = seg[b, q_idx]
            sk = seg[b, kv_idx]
            return (sq != -1) & (sk != -1) & (kv_idx <= q_idx) & ((sk == 0) | (sk == sq))

        return branch_causal
    opt = _padded(option_ids, block_size, 0)

    def branch_option_causal(b, h, q_idx, kv_idx):
        sq = seg[b, q_idx]
        sk = seg[b, kv_idx]
        oq = opt[b, q_idx]
        ok = opt[b, kv_idx]
        same = (sk == sq) & ((ok == 0) | (oq == 0) | (ok == oq))
        return (sq != -1) & (sk != -1) & (kv_idx <= q_idx) & ((sk == 0) | same)

    return branch_option_causal


def sliding_window_mod(position_ids: torch.Tensor, window: int, block_size: int = BLOCK_SIZE):
    """mask_mod: ``pos[q] - pos[kv] < window`` on restarted position ids ``[B, L]``.

    Raises:
        ValueError: ``window`` < 1.
    """
    if window < 1:
        raise ValueError(f"sliding window must be >= 1, got {window}")
    pos = _padded(position_ids, block_size, 0)

    def sliding_window(b, h, q_idx, kv_idx):
        return (pos[b, q_idx] - pos[b, kv_idx]) < window

    return sliding_window


def packed_mask_mod(segment_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
                    window: int | None = None, option_ids: torch.Tensor | None = None,
                    block_size: int = BLOCK_SIZE):
    """The packed-branch mask_mod: padding-self OR (branch-causal AND optional sliding window)."""
    inner = branch_causal_mod(segment_ids, option_ids, block_size)
    if window is not None:
        if position_ids is None:
            raise ValueError("a sliding-window mask needs position_ids")
        inner = and_masks(inner, sliding_window_mod(position_ids, window, block_size))
    return or_masks(padding_self_mod(segment_ids, block_size), inner)


def dense_mask(segment_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
               window: int | None = None, option_ids: torch.Tensor | None = None,
               chunk_elements: int = 1 << 24) -> torch.Tensor:
    """The mask_mod materialised element by element: bool ``[B, 1, L, L]``, True = attend
    (what sdpa takes). Built with torch's ``create_mask`` from the same mask_mod as the BlockMask,
    in blocks of query rows holding at most ``chunk_elements`` entries: ``create_mask`` evaluates the
    mask_mod with int64 intermediates (8 bytes per entry), which at 64k tokens would need tens of GB
    at once; chunked, the peak is the bool result (L² bytes) plus a few hundred MB."""
    B, L = segment_ids.shape
    mod = packed_mask_mod(segment_ids, position_ids, window, option_ids)
    rows = max(1, chunk_elements // max(1, L))
    if rows >= L:
        return create_mask(mod, B, None, L, L, device=segment_ids.device)
    out = torch.empty((B, 1, L, L), dtype=torch.bool, device=segment_ids.device)
    for q0 in range(0, L, rows):
        n = min(rows, L - q0)

        def shifted(b, h, q_idx, kv_idx, q0=q0):
            return mod(b, h, q_idx + q0, kv_idx)

        out[:, :, q0:q0 + n] = create_mask(shifted, B, None, n, L, device=segment_ids.device)
    return out


def branch_rows_mask(n_state: int, segment_ids: torch.Tensor, option_ids: torch.Tensor) -> torch.Tensor:
    """The rows of the packed mask for branch tokens that follow ``n_state`` state tokens: bool
    ``[1, 1, T, n_state + T]`` (the state cache's query rows; its state keys/values are already computed).
    ``segment_ids``/``option_ids``: ``[T]`` long of the branch tokens (segments ≥ 1, options as in
    :func:`branch_causal_mod`). The same rule as the mask_mod — every state column visible; inside the
    branches causal, same segment, no sibling option — written as broadcasts: ~1 ms where ``create_mask``
    takes ~30 ms for a 300-token tail, on a path whose point is speed (a test keeps the two equal)."""
    T = segment_ids.shape[0]
    order = torch.arange(T, device=segment_ids.device)
    oq, ok = option_ids[:, None], option_ids[None, :]
    visible = ((segment_ids[:, None] == segment_ids[None, :]) & (order[None, :] <= order[:, None])
               & ((oq == 0) | (ok == 0) | (oq == ok)))
    state = torch.ones((T, n_state), dtype=torch.bool, device=segment_ids.device)
    return torch.cat([state, visible], 1)[None, None]


def block_mask(segment_ids: torch.Tensor, position_ids: torch.Tensor | None = None,
               window: int | None = None, option_ids: torch.Tensor | None = None,
               block_size: int = BLOCK_SIZE):
    """FlexAttention ``BlockMask`` of the same mask_mod (fully masked 128×128 tiles are skipped)."""
    B, L = segment_ids.shape
    mod = packed_mask_mod(segment_ids, position_ids, window, option_ids, block_size)
    return create_block_mask(mod, B, None, L, L, device=segment_ids.device, BLOCK_SIZE=block_size)


def reference_mask(segment_ids: np.ndarray, position_ids: np.ndarray | None = None,
                   window: int | None = None, option_ids: np.ndarray | None = None) -> np.ndarray:
    """Independent numpy reference of the same rule, bool ``[B, L, L]``; used only by tests."""
    seg = np.asarray(segment_ids)
    B, L = seg.shape
    opts = np.zeros_like(seg) if option_ids is None else np.asarray(option_ids)
    q = np.arange(L)[:, None]
    kv = np.arange(L)[None, :]
    out = np.zeros((B, L, L), dtype=bool)
    for b in range(B):
        sq = seg[b][:, None]
        sk = seg[b][None, :]
        oq = opts[b][:, None]
        ok = opts[b][None, :]
        same_branch = (sk == sq) & ((ok == 0) | (oq == 0) | (ok == oq))
        allowed = (sq != -1) & (sk != -1) & (kv <= q) & ((sk == 0) | same_branch)
        if window is not None:
            pos = np.asarray(position_ids)[b]
            allowed &= (pos[:, None] - pos[None, :]) < window
        out[b] = allowed | ((sq == -1) & (q == kv))
    return out


def reference_block_reduce(mask: np.ndarray, block_size: int = BLOCK_SIZE) -> np.ndarray:
    """``[B, L, L]`` bool -> ``[B, nq, nkv]`` bool: a tile is True iff any element in it is True
    (what ``BlockMask.to_dense()`` reports: a tile is computed unless it is fully masked)."""
    B, L, _ = mask.shape
    n = -(-L // block_size)
    padded = np.zeros((B, n * block_size, n * block_size), dtype=bool)
    padded[:, :L, :L] = mask
    return padded.reshape(B, n, block_size, n, block_size).any(axis=(2, 4))


def sliding_window_of(config) -> int | None:
    """The window of the backbone's sliding layers, or None when it has none."""
    layer_types = getattr(config, "layer_types", None) or ()
    window = getattr(config, "sliding_window", None)
    if window and "sliding_attention" in layer_types:
        return int(window)
    return None
