"""Abandoning a forward pass whose answers nobody waits for any more.

A server request that times out, or whose client disconnects, while its forward pass runs would otherwise keep the
model thread busy until the pass ends (a long state on a CPU: seconds to minutes), and every request
queued behind it would wait, and time out, too. :func:`abortable` registers a forward pre-hook on each decoder
layer of the engine's models that asks ``should_abort()`` before the layer runs and raises :class:`PassAborted`
when it says yes, so an abandoned pass stops within one layer's time (1/30 of a pass for SmolLM2-135M, 1/24 and
1/28 for Qwen2.5-Coder-0.5B and -1.5B). Nothing is half-written: the state cache stores a state's keys and values
only after its pass returns. Hooks are PyTorch's ``Module.register_forward_pre_hook``; they are removed when the ``with`` block ends.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch


class PassAborted(RuntimeError):
    """A forward pass stopped by :func:`abortable` because ``should_abort()`` turned true."""


def engine_modules(engine) -> list[torch.nn.Module]:
    """The torch models an engine runs: ``engine.model`` for an :class:`~kevlike.model.engine.Engine`, its members'
    for an ensemble (whose ``model`` is itself), each once."""
    members = getattr(engine, "members", None)
    if members is not None:
        return list({id(m): m for e in members for m in engine_modules(e)}.values())
    model = getattr(engine, "model", None)
    return [model] if isinstance(model, torch.nn.Module) else []


def decoder_layers(models: Iterable[torch.nn.Module]) -> list[torch.nn.Module]:
    """Each model's decoder layers — transformers' ``GradientCheckpointingLayer`` modules, the ones
    :func:`kevlike.training.train.checkpointed_layers` recomputes — or the model itself when it has none: where
    :func:`abortable` asks. A walk over every submodule, so callers find them once, not per pass."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    out = []
    for model in models:
        out += [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)] or [model]
    return out


@contextmanager
def abortable(layers: Iterable[torch.nn.Module], should_abort: Callable[[], bool]) -> Iterator[None]:
    """Within the block, every module of ``layers`` (:func:`decoder_layers`) first calls ``should_abort()`` (no
    arguments; it runs on the forward pass's thread, before each layer) and raises :class:`PassAborted` when it
    returns true.

    Raises:
        PassAborted: from the forward pass inside the block, once ``should_abort()`` is true.
    """

    def hook(module, args):
        if should_abort():
            raise PassAborted("forward pass abandoned: no request in its batch is waiting for the answer")

    handles = [layer.register_forward_pre_hook(hook) for layer in layers]
    try:
        yield
    finally:
        for h in handles:
            h.remove()
