"""Attention backend per device, and the mask object each backend takes (DESIGN.md §6).

* CPU: ``kevlike_packed`` (:mod:`.packed`): no mask at all; the state's causal part and each
  branch's two parts (state keys, own keys) are separate flash-attention calls merged by their
  log-sum-exps, so masked pairs are never computed. Inference only; falls back to ``sdpa`` with the
  dense mask for what it does not cover (sliding-window layers, option sub-branches).
* ``sdpa`` with the dense bool mask ``[B, 1, L, L]`` (True = attend): the reference, and training.
* CUDA: ``flex_attention`` with a ``BlockMask`` (fully masked tiles skipped).

Never mixed: ``eager`` with a bool mask silently adds 0/1 to the scores, flex with a 4-D tensor
mask crashes, sdpa/eager with a BlockMask raise. :func:`attention_mask_for` therefore builds the
mask type from the backend name and refuses any other backend.

For backbones with sliding-window layers (``config.layer_types`` containing
``"sliding_attention"``), the stock model accepts a mapping ``{layer type: mask}``; the sliding
mask applies the window to the restarted position ids.
"""

from __future__ import annotations

import functools

import torch

from kevlike.model.kernels.block_sparse import PackedLayout, register, sentinel_mask, supports
from kevlike.model.kernels.masks import block_mask, dense_mask, sliding_window_of

BACKENDS = ("sdpa", "flex_attention", "kevlike_packed")


def default_backend(device: torch.device | str) -> str:
    """``"flex_attention"`` on CUDA, ``"kevlike_packed"`` elsewhere (chosen by ``kevlike bench``: it is
    faster than dense ``sdpa`` at every measured size on the CPU, see docs/results/performance.md)."""
    return "flex_attention" if torch.device(device).type == "cuda" else "kevlike_packed"


def check_backend(backend: str) -> str:
    """Return ``backend`` if it is one of :data:`BACKENDS`.

    Raises:
        ValueError: any other backend (``eager`` would silently misread a bool mask).
    """
    if backend not in BACKENDS:
        raise ValueError(f"attention backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "kevlike_packed":
        register()
    return backend


@functools.lru_cache(maxsize=None)
def _flex_backward_error(device_type: str) -> str | None:
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    try:
        q = torch.randn(1, 1, 16, 8, device=device_type, requires_grad=True)
        bm = create_block_mask(lambda b, h, qi, ki: ki <= qi, 1, None, 16, 16, device=device_type)
        flex_attention(q, q, q, block_mask=bm).sum().backward()
    except Exception as e:  # what torch says, measured: NotImplementedError on the CPU in torch 2.13
        return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
    return None


def flex_backward_error(device: torch.device | str) -> str | None:
    """None when FlexAttention runs a backward on ``device`` (measured once per device type with a 16-token causal
    probe, eager), else torch's error in one line. torch 2.13 has none on the CPU (eager and compiled:
    ``NotImplementedError``); on CUDA it runs."""
    return _flex_backward_error(torch.device(device).type)


def share_backends(model) -> None:
    """Set ``model``'s attention implementation to ``kevlike_packed``, which dispatches on the mask it is given
    (a ``BlockMask``: transformers' flex attention; a dense tensor: its sdpa; :func:`.block_sparse.packed_attention`),
    so engines of several backends can share one model on any device (``kevlike bench --compare``, ``kevlike
    gpu-check``). Each :class:`kevlike.model.engine.Engine` otherwise switches the shared model to its own backend
    when it is built, and an engine built earlier then hands its mask type to the wrong kernel."""
    register()
    if getattr(model.config, "_attn_implementation", None) != "kevlike_packed":
        model.set_attn_implementation("kevlike_packed")


def attention_mask_for(backend: str, config, segment_ids: torch.Tensor, position_ids: torch.Tensor,
                       option_ids: torch.Tensor | None = None):
    """The ``attention_mask`` argument for the stock HF model.

    Args:
        backend: ``"sdpa"`` or ``"kevlike_packed"`` (dense bool ``[B, 1, L, L]``), or
            ``"flex_attention"`` (``BlockMask``).
        config: the backbone's HF config (read for sliding-window layers).
        segment_ids, position_ids: ``[B, L]`` long, from :func:`kevlike.request.pack.pack`.
        option_ids: ``[B, L]`` long or None: option sub-branches (see :mod:`.masks`).

    Returns:
        the mask, or ``{"full_attention": mask, "sliding_attention": windowed mask}`` for backbones
        with sliding-window layers.

    Raises:
        ValueError: any other backend (``eager`` would silently misread a bool mask).
    """
    build = block_mask if check_backend(backend) == "flex_attention" else dense_mask
    full = build(segment_ids, option_ids=option_ids)
    window = sliding_window_of(config)
    if window is None:
        return full
    return {"full_attention": full,
            "sliding_attention": build(segment_ids, position_ids, window, option_ids=option_ids)}


def attention_inputs(backend: str, config, segment_ids: torch.Tensor, position_ids: torch.Tensor,
                     option_ids: torch.Tensor | None = None) -> dict:
    """Keyword arguments for the stock decoder's forward that carry the packed mask.

    ``kevlike_packed`` gets ``{"attention_mask": sentinel, "packed_layout": PackedLayout}`` when it covers
    the forward (:func:`.packed.supports`), else the dense mask (its fallback path is sdpa); the
    other backends get ``{"attention_mask": attention_mask_for(...)}``.
    """
    if check_backend(backend) == "kevlike_packed":
        if supports(config, option_ids):
            try:
                layout = PackedLayout.from_segments(segment_ids, option_ids)
            except ValueError:            # a layout the kernel does not cover: the dense mask below
                layout = None
            if layout is not None:
                return {"attention_mask": sentinel_mask(segment_ids.shape[0], segment_ids.device),
                        "packed_layout": layout}
    return {"attention_mask": attention_mask_for(backend, config, segment_ids, position_ids, option_ids)}
