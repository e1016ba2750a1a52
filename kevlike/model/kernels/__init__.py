"""Attention masks and backends for packed branches (installed as ``kevlike.model.kernels``)."""

from kevlike.model.kernels.attention import (BACKENDS, attention_inputs, attention_mask_for, check_backend, default_backend,
                                             flex_backward_error, share_backends)
from kevlike.model.kernels.masks import (sliding_window_of, block_mask, branch_causal_mod, dense_mask, packed_mask_mod, padding_self_mod,
                    reference_block_reduce, reference_mask, sliding_window_mod)

__all__ = ["BACKENDS", "flex_backward_error", "share_backends", "attention_inputs", "attention_mask_for", "check_backend", "default_backend", "sliding_window_of", "block_mask",
           "branch_causal_mod", "dense_mask", "packed_mask_mod", "padding_self_mod", "reference_block_reduce",
           "reference_mask", "sliding_window_mod"]
