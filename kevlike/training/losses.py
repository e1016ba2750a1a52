"""Training losses (DESIGN.md §8). Questions are rows of a padded ``[N, K]`` logit matrix whose padded
entries are ``-inf``; targets are probabilities over the same K (0 on padding).

* :func:`soft_cross_entropy` — log loss with soft targets, ``−Σ_k y_k log p_k`` (a proper scoring rule).
* :func:`symmetric_kl` — ``½ (KL(p‖q) + KL(q‖p))`` between the answer distributions of the same
  question under two option orders, aligned to one order (a regulariser for order invariance).
* :func:`ranked_probability_score` — ``1/(K−1) Σ_{k<K} (F_p(k) − F_y(k))²`` with F the cumulative
  distributions over the ordered levels (Epstein 1969, "A scoring system for probability forecasts
  of ranked categories"; Murphy 1971's normalisation by K−1, so the RPS lies in [0, 1]).
* :func:`normal_readout_nll` — log loss of the target under the ``"normal"`` score readout
  (:func:`kevlike.model.temperatures.normal_readout`), so that training moves the distribution's mean and
  spread, which is what that readout serves, rather than only the gold level's own mass.
"""

from __future__ import annotations

import torch

from kevlike.model.temperatures import NORMAL_MIN_LEVELS, normal_logits


def _log_probs(logits: torch.Tensor) -> torch.Tensor:
    """``log_softmax`` with ``-inf`` padding kept finite where needed (0·(−inf) would be NaN)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.masked_fill(torch.isinf(logits), 0.0)


def soft_cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-question log loss ``[N]`` (nats) from logits ``[N, K]`` (``-inf`` on padding) and target
    probabilities ``[N, K]`` (rows sum to 1, 0 on padding)."""
    return -(targets * _log_probs(logits)).sum(-1)


def symmetric_kl(logits_a: torch.Tensor, logits_b: torch.Tensor) -> torch.Tensor:
    """Per-pair ``½(KL(p_a‖p_b) + KL(p_b‖p_a))`` ``[N]`` (nats); both ``[N, K]`` in the same option
    order with ``-inf`` on the same padded entries. 0 iff the two distributions are equal."""
    la, lb = _log_probs(logits_a), _log_probs(logits_b)
    pa, pb = la.exp() * ~torch.isinf(logits_a), lb.exp() * ~torch.isinf(logits_b)
    return 0.5 * ((pa * (la - lb)).sum(-1) + (pb * (lb - la)).sum(-1))


def ranked_probability_score(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-question RPS ``[N]`` in [0, 1] for ordered levels: logits ``[N, K]`` (``-inf`` on padding,
    padding only at the end), targets ``[N, K]``. A one-hot prediction of the true level scores 0."""
    p = torch.softmax(logits.float(), dim=-1)
    valid = ~torch.isinf(logits)
    n_levels = valid.sum(-1).clamp(min=2)
    diff = torch.cumsum(p, -1) - torch.cumsum(targets.float(), -1)            # (N, K)
    # the last real level's cumulative difference is 0 by construction; padded ones too
    return (diff.pow(2) * valid).sum(-1) / (n_levels - 1)


def normal_readout_nll(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Per-question log loss ``[N]`` (nats) of targets ``[N, K]`` under the discretised normal with the mean and
    variance of ``softmax(logits)`` over each row's real levels (``-inf`` padding at the end): the training twin of
    :func:`kevlike.model.temperatures.normal_readout` at T = 1, differentiable through μ and σ². Rows with fewer
    than ``NORMAL_MIN_LEVELS`` real levels, which that readout leaves as they are, get their plain
    :func:`soft_cross_entropy`."""
    valid = ~torch.isinf(logits)
    z_normal = normal_logits(torch.softmax(logits.float(), dim=-1)).masked_fill(~valid, float("-inf"))
    normal = soft_cross_entropy(z_normal, targets)
    return torch.where(valid.sum(-1) >= NORMAL_MIN_LEVELS, normal, soft_cross_entropy(logits, targets))
