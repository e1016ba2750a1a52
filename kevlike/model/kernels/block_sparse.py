"""Block-sparse packed attention for the CPU: no ``[L, L]`` mask, no masked pairs computed.

The packed mask (DESIGN.md §6) has a fixed shape: the state is causal, and every branch reads the
whole state plus its own causal triangle. So a branch token's attention splits exactly into two
parts over disjoint key sets,

    part 1: the branch's queries × the state's keys        (no mask: every state key is visible)
    part 2: the branch's queries × its own keys            (causal)

and the two softmax pieces are merged with their log-sum-exps (the flash-attention merge, Dao et al.
2022, "FlashAttention", §3.1; Milakov & Gimelshein 2018, "Online normalizer calculation for softmax"):

    lse = log(exp(lse₁) + exp(lse₂)),   out = exp(lse₁ − lse)·out₁ + exp(lse₂ − lse)·out₂.

Each part is one call of torch's CPU flash-attention kernel
(``aten._scaled_dot_product_flash_attention_for_cpu``, which returns the log-sum-exp); part 2 runs
all branches of a request as one padded batch ``[NB, H, L_max, d]`` with ``is_causal`` (padding sits
at the end of each branch, so a real query never sees it). The state is one causal call. Work and
memory are what the FLOP model counts — S²/2 + Σ L_q·(S + L_q/2) score entries — instead of L², and
nothing of size L² is ever allocated (a 32k-token request needs no 1 GiB mask).

The function is registered with transformers' ``AttentionInterface`` as ``"kevlike_packed"`` (and
sdpa's mask function under the same name, so any other call of the model — plain causal text, a KV
cache, a 2-D padding mask — is exactly transformers' sdpa). A packed forward passes the
:class:`PackedLayout` as the ``packed_layout`` keyword of the decoder's forward (transformers forwards
extra keywords to every attention call) together with :func:`sentinel_mask`, an empty 4-D tensor
that transformers passes through untouched, so it builds no ``[L, L]`` mask of its own (with restarted
positions and no mask it would infer packed documents, PITFALLS.md #1). Inference only: the kernel's
log-sum-exp output has no gradient, so training keeps ``sdpa`` with the dense mask. Option
sub-branches (set mode, the LM readout's answers) are covered by a third key set (:class:`RowLayout` ``prefixes``: a sub-branch token also
reads its branch's prompt, non-causally), so a set-mode request of thousands of options costs what its
tokens cost. Backbones with sliding-window layers are not covered (:func:`supports` says so) and use ``sdpa``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from kevlike.model.kernels.masks import sliding_window_of

NAME = "kevlike_packed"


@dataclass(frozen=True)
class RowLayout:
    """One packed row: the state at ``[state_start, state_end)``, then branches back to back.

    A branch is one *unit* (its tokens see each other causally), or, with option sub-branches (set
    mode, the LM readout), a prompt unit followed by one unit per sub-branch. Units are grouped by
    length (powers of two), so a long prompt never pads hundreds of three-token options to its length:
    ``gather`` holds one ``[NU_g, L_g]`` index tensor per group (token indices relative to
    ``state_end``; padding repeats the unit's last token), and ``scatter [N_b]`` maps each branch token
    to its place in the groups' flattened ``[NU_g · L_g]`` batches, concatenated. ``prefixes`` lists, per branch with sub-branches, ``(queries, start, end)``:
    the sub-branch tokens (relative to ``state_end``) that also see the prompt ``[start, end)``
    (a third key set, non-causal: the whole prompt precedes them)."""

    state_start: int
    state_end: int
    branch_end: int
    gather: tuple
    scatter: torch.Tensor
    prefixes: tuple = ()


@dataclass(frozen=True)
class PackedLayout:
    """The structure of a packed batch, read from ``segment_ids`` once per forward pass.

    Tokens outside every row's ``[state_start, branch_end)`` are padding; their attention output is 0
    (nothing reads them)."""

    rows: tuple[RowLayout, ...]
    length: int

    @classmethod
    def from_segments(cls, segment_ids: torch.Tensor, option_ids: torch.Tensor | None = None) -> "PackedLayout":
        """``segment_ids [B, L]`` long (0 state, k ≥ 1 branch k, −1 padding) and optionally ``option_ids
        [B, L]`` (o ≥ 1 on option sub-branch o, else 0), from :func:`kevlike.request.pack.pack`.

        Raises:
            ValueError: a row whose segments are not ``[state][branch 1]…[branch NB]`` contiguous
                (left or right padding allowed), or a branch that is not ``[prompt][sub 1]…[sub K]``.
        """
        seg = segment_ids.detach().cpu()
        opt = None if option_ids is None else option_ids.detach().cpu()
        rows = []
        for b in range(seg.shape[0]):
            s = seg[b]
            real = (s != -1).nonzero().flatten()
            if real.numel() == 0:
                raise ValueError(f"row {b} has no tokens")
            start, end = int(real[0]), int(real[-1]) + 1
            body = s[start:end]
            if bool((body == -1).any()) or bool((body[1:] < body[:-1]).any()) or int(body[0]) != 0:
                raise ValueError(f"row {b}: segments are not [state][branch 1]…[branch NB] back to back")
            state_end = start + int((body == 0).sum())
            branches = body[state_end - start:]
            if branches.numel() == 0:
                rows.append(RowLayout(start, state_end, state_end, (), torch.empty(0, dtype=torch.long)))
                continue
            subs = torch.zeros_like(branches) if opt is None else opt[b, state_end:end]
            # units: runs of equal (branch, sub-branch); sub-branches follow their branch's prompt in order
            _, counts = torch.unique_consecutive(branches * (int(subs.max()) + 2) + subs, return_counts=True)
            counts = counts.tolist()
            firsts = torch.tensor([0, *counts[:-1]]).cumsum(0).tolist()
            prefixes, prompt = [], None
            for first, n in zip(firsts, counts):
                o = int(subs[first])
                new_branch = first == 0 or int(branches[first]) != int(branches[first - 1])
                if o == 0:
                    if not new_branch:
                        raise ValueError(f"row {b}: question tokens after option sub-branches")
                    prompt = (first, first + n)
                    continue
                if new_branch or prompt is None or (int(subs[first - 1]) >= o):
                    raise ValueError(f"row {b}: option sub-branches must follow their branch's prompt in order")
                prefixes.append((first, first + n, *prompt))
            groups: dict = {}
            for off, n in zip(firsts, counts):
                groups.setdefault((n - 1).bit_length(), []).append((off, n))
            gather, scatter, base = [], torch.empty(len(branches), dtype=torch.long), 0
            for _, units in sorted(groups.items()):
                lmax = max(n for _, n in units)
                g = torch.empty((len(units), lmax), dtype=torch.long)
                for j, (off, n) in enumerate(units):
                    g[j, :n] = torch.arange(off, off + n)
                    g[j, n:] = off + n - 1
                    scatter[off:off + n] = base + j * lmax + torch.arange(n)
                gather.append(g)
                base += len(units) * lmax
            gather = tuple(gather)
            # group the sub-branches of one prompt: one non-causal call per branch
            grouped: dict = {}
            for q0, q1, p0, p1 in prefixes:
                grouped.setdefault((p0, p1), []).append(torch.arange(q0, q1))
            rows.append(RowLayout(start, state_end, end, gather, scatter,
                                  tuple((torch.cat(qs), p0, p1) for (p0, p1), qs in grouped.items())))
        return cls(tuple(rows), seg.shape[1])


def sentinel_mask(batch: int, device=None) -> torch.Tensor:
    """The ``attention_mask`` that goes with ``packed_layout``: bool ``[B, 1, 0, 0]``, never read."""
    return torch.empty((batch, 1, 0, 0), dtype=torch.bool, device=device)


def supports(config, option_ids: torch.Tensor | None = None) -> bool:
    """Whether the packed kernel covers this forward: no sliding-window layers (option sub-branches
    are covered when each branch is ``[prompt][sub 1]…[sub K]``, see :meth:`PackedLayout.from_segments`)."""
    return sliding_window_of(config) is None


_flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def _attend(q, k, v, causal: bool, scale: float):
    """``q [N, H, Lq, d]``, ``k, v [N, H, Lk, d]`` -> (out ``[N, H, Lq, d]``, lse ``[N, H, Lq]`` float32)."""
    out, lse = _flash(q, k, v, 0.0, causal, scale=scale)
    return out, lse.float()


def packed_attention(module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask=None, scaling: float | None = None, dropout: float = 0.0,
                     packed_layout: PackedLayout | None = None, **kwargs):
    """transformers attention function: ``query [B, H, L, d]``, ``key/value [B, H_kv, L, d]`` ->
    (``[B, L, H, d]``, None). Exact (same softmax, split over disjoint key sets) up to float rounding.

    Without ``packed_layout`` it is transformers' sdpa with whatever mask it was given (the dense
    packed mask that :func:`.attention.attention_inputs` passes for forwards the kernel does not
    cover, or transformers' own mask for plain calls), and transformers' flex attention when that
    mask is a ``BlockMask``: a model set to ``kevlike_packed`` serves every backend's engine.

    Raises:
        ValueError: the sentinel mask without ``packed_layout``; dropout or gradients with it.
    """
    if packed_layout is None:
        from torch.nn.attention.flex_attention import BlockMask

        if isinstance(attention_mask, BlockMask):
            from transformers.integrations.flex_attention import flex_attention_forward

            return flex_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                          dropout=dropout, **kwargs)
        if attention_mask is not None and attention_mask.numel() == 0:
            raise ValueError(f"the {NAME!r} sentinel mask needs packed_layout= in the same forward call")
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling,
                                      dropout=dropout, **kwargs)
    if dropout:
        raise ValueError(f"{NAME!r} is inference only (dropout={dropout})")
    if torch.is_grad_enabled() and query.requires_grad:
        raise ValueError(f"{NAME!r} is inference only: its log-sum-exp has no gradient; train with sdpa")
    # under autocast the rotary embedding leaves query/key float32 beside a bfloat16 value; sdpa (the path above)
    # is an autocast op and runs in the autocast dtype, and so does this kernel (its flash op takes one dtype)
    dev = query.device.type
    dt = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else query.dtype
    query, key, value = query.to(dt), key.to(dt), value.to(dt)
    B, H, L, d = query.shape
    groups = H // key.shape[1]
    if groups > 1:  # grouped-query attention: one key/value head per group of query heads
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    scale = scaling if scaling is not None else d ** -0.5
    out = query.new_zeros((B, H, L, d))
    for b, row in enumerate(packed_layout.rows):
        s0, s1, e = row.state_start, row.state_end, row.branch_end
        ks, vs = key[b:b + 1, :, s0:s1], value[b:b + 1, :, s0:s1]
        out[b:b + 1, :, s0:s1] = _attend(query[b:b + 1, :, s0:s1], ks, vs, True, scale)[0]
        if e == s1:
            continue
        qb, kb, vb = query[b, :, s1:e], key[b, :, s1:e], value[b, :, s1:e]          # (H, N_b, d)
        o1, lse1 = _attend(qb[None], ks, vs, False, scale)                          # (1, H, N_b, ·)
        outs, lses = [], []
        for gather in row.gather:              # units of similar length: one padded causal batch each
            NU, lmax = gather.shape
            g = gather.to(query.device).reshape(-1)

            def batched(t):  # (H, N_b, d) -> (NU, H, L_max, d)
                return t[:, g].reshape(H, NU, lmax, d).transpose(0, 1)

            o2, lse2 = _attend(batched(qb), batched(kb), batched(vb), True, scale)  # (NU, H, L_max, ·)
            outs.append(o2.transpose(0, 1).reshape(H, NU * lmax, d))
            lses.append(lse2.transpose(0, 1).reshape(H, NU * lmax))
        sc = row.scatter.to(query.device)
        o2 = torch.cat(outs, 1)[:, sc]                                              # (H, N_b, d)
        lse2 = torch.cat(lses, 1)[:, sc]                                            # (H, N_b)
        o1, lse1 = o1[0], lse1[0]
        for idx, p0, p1 in row.prefixes:      # sub-branch tokens × their branch's prompt: a third key set
            idx = idx.to(query.device)
            o3, lse3 = _attend(qb[None, :, idx], kb[None, :, p0:p1], vb[None, :, p0:p1], False, scale)
            lse13 = torch.logaddexp(lse1[:, idx], lse3[0])
            o1[:, idx] = (torch.exp(lse1[:, idx] - lse13).unsqueeze(-1).to(query.dtype) * o1[:, idx]
                          + torch.exp(lse3[0] - lse13).unsqueeze(-1).to(query.dtype) * o3[0])
            lse1[:, idx] = lse13
        lse = torch.logaddexp(lse1, lse2)
        w1 = torch.exp(lse1 - lse).unsqueeze(-1).to(query.dtype)
        w2 = torch.exp(lse2 - lse).unsqueeze(-1).to(query.dtype)
        out[b, :, s1:e] = w1 * o1 + w2 * o2
    return out.transpose(1, 2).contiguous(), None


def register() -> None:
    """Register :func:`packed_attention` with transformers as ``"kevlike_packed"`` (idempotent)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(NAME, packed_attention)
    AttentionMaskInterface.register(NAME, sdpa_mask)
