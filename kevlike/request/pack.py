"""Packing encoded requests into one batch of sequences (DESIGN.md §2, §5).

Notation: B requests, L packed length (longest request, plus padding), NB branches per request
(padded to the batch maximum), K options per branch (padded to the batch maximum).

Layout of one request: ``[state][branch 1]…[branch NB]``. ``segment_ids`` are 0 for the state,
k for branch k (1-based) and -1 for padding; ``position_ids`` run 0…S−1 over the state and restart
at S for every branch, so each branch sees exactly the positions of its separate run.

A branch with answer sub-branches (the LM readout) is laid out ``[prompt][answer 1]…[answer K]``;
``option_ids`` are o ≥ 1 on answer o's tokens (0 elsewhere), and every answer's positions restart
right after the prompt. The LM readout's none answer (``x_abstain``, :attr:`EncodedBranch.none
<kevlike.request.encode.EncodedBranch>`) is one more such sub-branch, after the answers (``option_ids`` K_b + 1).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Sequence

import torch

from kevlike.request.encode import EncodedRequest


@dataclass
class PackedBatch:
    input_ids: torch.Tensor      # [B, L] long
    segment_ids: torch.Tensor    # [B, L] long: 0 state, k ≥ 1 branch k, -1 padding
    position_ids: torch.Tensor   # [B, L] long: restarted at S for every branch; 0 on padding
    option_ids: torch.Tensor     # [B, L] long: o ≥ 1 on answer sub-branch o, else 0
    branch_mask: torch.Tensor    # [B, NB] bool: branch exists
    decide_index: torch.Tensor   # [B, NB] long: packed index of each branch's read token (0 if absent)
    option_index: torch.Tensor   # [B, NB, K] long: packed index of option k's </opt>, or of answer k's first token
    option_end: torch.Tensor     # [B, NB, K] long: one past option k's last read token
    option_mask: torch.Tensor    # [B, NB, K] bool
    n_tokens: list[int]          # real (unpadded) tokens per request
    none_index: torch.Tensor | None = None  # [B, NB] long: packed index of the none answer's first token (LM readout
    none_end: torch.Tensor | None = None    # [B, NB] long: one past its last token              with x_abstain)
    none_mask: torch.Tensor | None = None   # [B, NB] bool: the branch has a none answer; None: no branch has one

    def to(self, device) -> "PackedBatch":
        return PackedBatch(**{f.name: (getattr(self, f.name).to(device) if isinstance(getattr(self, f.name), torch.Tensor)
                                       else getattr(self, f.name)) for f in fields(self)})


def pack(requests: Sequence[EncodedRequest], pad_id: int, padding_side: str = "right",
         pad_to_multiple: int = 1) -> PackedBatch:
    """Pack B encoded requests into padded tensors.

    Args:
        requests: encoded requests (at least one).
        pad_id: token id used on padding (its value never matters: padding rows attend only to
            themselves and nothing attends to them).
        padding_side: ``"right"`` or ``"left"``; answers do not depend on it (tested).
        pad_to_multiple: round L up to a multiple of this (e.g. to bucket compiled lengths).

    Raises:
        ValueError: no requests, or an unknown ``padding_side``.
    """
    if not requests:
        raise ValueError("pack() needs at least one request")
    if padding_side not in ("right", "left"):
        raise ValueError(f"padding_side must be 'right' or 'left', got {padding_side!r}")
    B = len(requests)
    lengths = [r.n_tokens for r in requests]
    L = max(lengths)
    L = -(-L // pad_to_multiple) * pad_to_multiple
    NB = max(1, max(len(r.branches) for r in requests))
    K = max(1, max((max(len(b.options), len(b.answers)) for r in requests for b in r.branches), default=1))

    input_ids = torch.full((B, L), pad_id, dtype=torch.long)
    segment_ids = torch.full((B, L), -1, dtype=torch.long)
    position_ids = torch.zeros((B, L), dtype=torch.long)
    option_ids = torch.zeros((B, L), dtype=torch.long)
    branch_mask = torch.zeros((B, NB), dtype=torch.bool)
    decide_index = torch.zeros((B, NB), dtype=torch.long)
    option_index = torch.zeros((B, NB, K), dtype=torch.long)
    option_end = torch.zeros((B, NB, K), dtype=torch.long)
    option_mask = torch.zeros((B, NB, K), dtype=torch.bool)
    with_none = any(b.none for r in requests for b in r.branches)
    none_index = torch.zeros((B, NB), dtype=torch.long)
    none_end = torch.zeros((B, NB), dtype=torch.long)
    none_mask = torch.zeros((B, NB), dtype=torch.bool)

    for i, r in enumerate(requests):
        off = L - lengths[i] if padding_side == "left" else 0
        S = len(r.state_ids)
        ids = list(r.state_ids)
        seg = [0] * S
        pos = list(range(S))
        opt = [0] * S
        for k, b in enumerate(r.branches):
            start = off + len(ids)
            n = len(b.ids)
            ids.extend(b.ids)
            seg.extend([k + 1] * n)
            pos.extend(range(S, S + n))
            opt.extend([0] * n)
            branch_mask[i, k] = True
            decide_index[i, k] = start + b.decide
            for j, o in enumerate(b.options):
                option_index[i, k, j] = start + o
                option_end[i, k, j] = start + o + 1
                option_mask[i, k, j] = True
            for j, a in enumerate(b.answers):
                a_start = off + len(ids)
                ids.extend(a)
                seg.extend([k + 1] * len(a))
                pos.extend(range(S + n, S + n + len(a)))
                opt.extend([j + 1] * len(a))
                option_index[i, k, j] = a_start
                option_end[i, k, j] = a_start + len(a)
                option_mask[i, k, j] = True
            if b.none:
                a_start = off + len(ids)
                ids.extend(b.none)
                seg.extend([k + 1] * len(b.none))
                pos.extend(range(S + n, S + n + len(b.none)))
                opt.extend([len(b.answers) + 1] * len(b.none))
                none_index[i, k], none_end[i, k], none_mask[i, k] = a_start, a_start + len(b.none), True
        n = len(ids)
        input_ids[i, off:off + n] = torch.tensor(ids, dtype=torch.long)
        segment_ids[i, off:off + n] = torch.tensor(seg, dtype=torch.long)
        position_ids[i, off:off + n] = torch.tensor(pos, dtype=torch.long)
        option_ids[i, off:off + n] = torch.tensor(opt, dtype=torch.long)

    return PackedBatch(input_ids, segment_ids, position_ids, option_ids, branch_mask, decide_index,
                       option_index, option_end, option_mask, lengths,
                       *((none_index, none_end, none_mask) if with_none else ()))
