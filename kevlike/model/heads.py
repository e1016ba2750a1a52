"""Readouts: the pointer head (the product's) and the training-free LM readout (DESIGN.md §7).

A readout is one object (:class:`PointerReadout`, :class:`LMReadout`) that owns everything that differs
between the two: the template a request is encoded with, the layout of a choice question's options,
the logits read from the hidden states, and the temperature-table key. The engine calls it without
branching on which one it holds.

Notation: B requests, L packed length, d hidden size, NB branches, K options (padded).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from kevlike.request.encode import EncodedRequest, Encoder
from kevlike.request.pack import PackedBatch
from kevlike.request.schema import Request


def gather_positions(hidden: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``hidden [B, L, d]``, ``index [B, *rest]`` long -> ``[B, *rest, d]`` (hidden at those positions)."""
    B, L, d = hidden.shape
    flat = index.reshape(B, -1)                                   # (B, N)
    out = torch.gather(hidden, 1, flat.unsqueeze(-1).expand(B, flat.shape[1], d))  # (B, N, d)
    return out.reshape(*index.shape, d)


class PointerHead(nn.Module):
    """``z_k = (W_q h_dec) · (W_k h_k) / √d_head`` with h_dec the hidden state at ``<decide>`` and h_k the
    hidden state at option k's ``</opt>`` (in list mode after all options, in set mode after the
    question and before the options' sub-branches). Parameters are shared across positions, so one head serves any
    K and any label set. Scaled by 1/√d_head (unscaled scores drove training into denormals, DESIGN §6).

    With ``abstain`` the head also scores a learned *none* key ``w_none`` ``[d_head]`` (and a bias ``b_none``)
    against the same query: ``z_none = (W_q h_dec) · w_none / √d_head + b_none`` (:meth:`none_logit`). The
    abstention logit of a branch is ``z_none − logsumexp_k z_k`` (:func:`abstain_logit`), so ``x_abstain =
    sigmoid(that / T)`` is the probability of "none" in a softmax over the K options *and* none, while the
    options' own distribution (Jev's fields) stays ``softmax(z)``, the answer given the question is answerable.

    Args:
        d_model: backbone hidden size d.
        d_head: projection size (default d_model).
        abstain: add the none key and bias (the ``x_abstain`` capability); both start at 0.
    """

    def __init__(self, d_model: int, d_head: int | None = None, abstain: bool = False):
        super().__init__()
        self.d_model = d_model
        self.d_head = d_head or d_model
        self.w_q = nn.Linear(d_model, self.d_head, bias=False)
        self.w_k = nn.Linear(d_model, self.d_head, bias=False)
        self.abstain = bool(abstain)
        if self.abstain:
            self.w_none = nn.Parameter(torch.zeros(self.d_head))
            self.b_none = nn.Parameter(torch.zeros(()))

    def none_logit(self, h_decide: torch.Tensor) -> torch.Tensor:
        """``h_decide [B, NB, d]`` -> the none key's logit ``[B, NB]`` float32.

        Raises:
            ValueError: the head has no abstain key (``abstain=False``).
        """
        if not self.abstain:
            raise ValueError("this pointer head has no abstain key (it was built with abstain=False)")
        q = self.w_q(h_decide.to(self.w_q.weight.dtype))              # (B, NB, dh)
        return (q @ self.w_none).float() / math.sqrt(self.d_head) + self.b_none.float()

    def forward(self, h_decide: torch.Tensor, h_options: torch.Tensor, option_mask: torch.Tensor) -> torch.Tensor:
        """``h_decide [B, NB, d]``, ``h_options [B, NB, K, d]``, ``option_mask [B, NB, K]`` bool ->
        logits ``[B, NB, K]`` float32, ``-inf`` on padded options."""
        q = self.w_q(h_decide.to(self.w_q.weight.dtype))              # (B, NB, dh)
        k = self.w_k(h_options.to(self.w_k.weight.dtype))             # (B, NB, K, dh)
        z = torch.einsum("bnd,bnkd->bnk", q, k).float() / math.sqrt(self.d_head)
        return z.masked_fill(~option_mask, float("-inf"))


def pointer_logits(head: PointerHead, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """Pointer logits ``[B, NB, K]`` (float32, -inf on padding) from backbone hidden states ``[B, L, d]``.
    Option k is read at its last token, ``option_end − 1``: the ``</opt>`` of list mode, and the
    ``</opt>`` closing its sub-branch in set mode."""
    h_dec = gather_positions(hidden, batch.decide_index)                        # (B, NB, d)
    h_opt = gather_positions(hidden, (batch.option_end - 1).clamp_min(0))       # (B, NB, K, d)
    return head(h_dec, h_opt, batch.option_mask)


def pointer_none_logits(head: PointerHead, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
    """The none key's logits ``[B, NB]`` (float32) read at each branch's ``<decide>`` (:meth:`PointerHead.none_logit`)."""
    return head.none_logit(gather_positions(hidden, batch.decide_index))


def abstain_logit(z: torch.Tensor, z_none: torch.Tensor) -> torch.Tensor:
    """``z_none − logsumexp_k z_k`` over the real options: ``z [..., K]`` (``-inf`` on padding), ``z_none [...]``
    -> ``[...]`` float32 (the log-odds of "none" in a softmax over the options and none, before the abstention
    temperature). The options are summed in ascending order of their logits, so the value is a symmetric function
    of the option set: reordering a question's options leaves it bit-identical."""
    zs = torch.sort(z.float(), dim=-1).values
    return z_none.float() - torch.logsumexp(zs, dim=-1)


def pool_abstain(enc: EncodedRequest, z: torch.Tensor, z_none: torch.Tensor) -> list[torch.Tensor]:
    """Per-question abstention logits (scalar tensors) of one request: ``z`` ``[NB, K]`` its branch logits,
    ``z_none`` ``[NB]`` its none logits. A question read in M option orders takes the mean of its branches'
    :func:`abstain_logit` (in branch order, which is a function of the option set)."""
    per_branch = abstain_logit(z, z_none)                                       # (NB,)
    per_q: list[list[torch.Tensor]] = [[] for _ in range(enc.n_questions)]
    for j, br in enumerate(enc.branches):
        per_q[br.question].append(per_branch[j])
    return [torch.stack(v).mean() for v in per_q]


def _mean_answer_logprob(hidden: torch.Tensor, batch: PackedBatch, lm_head: nn.Module,
                         spans: list[tuple[int, int, int, int]]) -> torch.Tensor:
    """Mean log-probability of each answer sub-branch in ``spans`` (``(b, j, start, end)``: request b, branch j,
    the answer at packed ``[start, end)``), ``[len(spans)]`` float32. The first answer token is scored by the branch's ``decide_index`` (the prompt's last token), each later one by the
    answer token before it; the LM head is applied only at those positions."""
    rows, cols, targets, group = [], [], [], []
    for g, (b, j, start, end) in enumerate(spans):
        reads = [int(batch.decide_index[b, j]), *range(start, end - 1)]
        rows.extend([b] * len(reads))
        cols.extend(reads)
        targets.extend(range(start, end))
        group.extend([g] * len(reads))
    dev = hidden.device
    rows_t = torch.tensor(rows, dtype=torch.long, device=dev)
    group_t = torch.tensor(group, dtype=torch.long, device=dev)
    h = hidden[rows_t, torch.tensor(cols, dtype=torch.long, device=dev)]        # (N, d)
    logp = torch.log_softmax(lm_head(h).float(), dim=-1)                       # (N, V)
    target = batch.input_ids.to(dev)[rows_t, torch.tensor(targets, dtype=torch.long, device=dev)]  # (N,)
    tok = logp.gather(1, target[:, None]).squeeze(1)                           # (N,)
    total = torch.zeros(len(spans), device=dev).index_add_(0, group_t, tok)
    count = torch.zeros(len(spans), device=dev).index_add_(0, group_t, torch.ones_like(tok))
    return total / count.clamp_min(1)


def lm_option_scores(hidden: torch.Tensor, batch: PackedBatch, lm_head: nn.Module) -> torch.Tensor:
    """LM readout: mean log-probability of each option's answer tokens, ``[B, NB, K]`` float32,
    ``-inf`` on padded options.

    Answer k of a branch occupies ``input_ids[option_index : option_end]`` (a sub-branch after the
    question prompt). Its first token is scored by the hidden state of the prompt's last token
    (``decide_index``), each later token by the previous answer token — inside the sub-branch, so it
    has read the state, the prompt and its own answer only. The LM head is applied only at those
    positions, not at all L.
    """
    B, NB, K = batch.option_mask.shape
    cells = batch.option_mask.nonzero().tolist()
    spans = [(b, j, int(batch.option_index[b, j, k]), int(batch.option_end[b, j, k])) for b, j, k in cells]
    flat = torch.full((B * NB * K,), float("-inf"), device=hidden.device)
    flat[torch.tensor([(b * NB + j) * K + k for b, j, k in cells], dtype=torch.long, device=hidden.device)] = \
        _mean_answer_logprob(hidden, batch, lm_head, spans)
    return flat.reshape(B, NB, K)


def lm_none_scores(hidden: torch.Tensor, batch: PackedBatch, lm_head: nn.Module) -> torch.Tensor:
    """LM readout with ``x_abstain``: mean log-probability of each branch's none answer
    (:data:`kevlike.request.render.LM_ABSTAIN_ANSWER`, at ``none_index : none_end``), ``[B, NB]`` float32, read as
    :func:`lm_option_scores` reads an option (0 on branches without one). With the options' scores ``z`` it gives
    the abstention logit ``z_none − logsumexp_k z_k`` (:func:`abstain_logit`), the pointer head's formula.

    Raises:
        ValueError: the batch was packed without none answers."""
    if batch.none_mask is None:
        raise ValueError("this batch has no none answers: encode it with encode_lm(request, abstain=True)")
    B, NB = batch.none_mask.shape
    cells = batch.none_mask.nonzero().tolist()
    out = torch.zeros(B * NB, device=hidden.device)
    spans = [(b, j, int(batch.none_index[b, j]), int(batch.none_end[b, j])) for b, j in cells]
    out[torch.tensor([b * NB + j for b, j in cells], dtype=torch.long, device=hidden.device)] = \
        _mean_answer_logprob(hidden, batch, lm_head, spans)
    return out.reshape(B, NB)


def pool_orders(enc: EncodedRequest, z: torch.Tensor) -> list[torch.Tensor]:
    """Per-question logits ``[K_q]`` in request option order from one request's branch logits
    ``z`` ``[NB, K]``. A question encoded in one order keeps its raw logits; one encoded in M orders
    (:func:`kevlike.request.encode.option_orders`) gets the log-linear pool of its branches,
    ``mean_m log_softmax(z_m)`` — a log-probability vector, so ``softmax`` of it (divided by the
    temperature) is the normalised geometric mean of the orders' distributions."""
    per_q: list[list[tuple[torch.Tensor, tuple[int, ...]]]] = [[] for _ in range(enc.n_questions)]
    for j, br in enumerate(enc.branches):
        K = max(len(br.options), len(br.answers))
        per_q[br.question].append((z[j, :K], br.order or tuple(range(K))))
    out = []
    for branches in per_q:
        first = branches[0][1]
        if len(branches) == 1:
            zc = branches[0][0]
        else:  # pool in the first branch's slot order, so the sums never depend on the request's order
            slots = [{i: s for s, i in enumerate(order)} for _, order in branches]
            zc = torch.stack([zj[torch.tensor([slot[i] for i in first])] for (zj, _), slot in zip(branches, slots)])
            zc = torch.log_softmax(zc, -1).mean(0)
        out.append(torch.empty_like(zc).index_copy_(0, torch.tensor(first), zc))
    return out


class PointerReadout:
    """The trained pointer head read at each ``<decide>`` (:func:`pointer_logits`), on the delimiter
    template; a choice question's options are laid out as the engine's option mode says (list or set).

    Args:
        head: the trained :class:`PointerHead`.
    """

    name = "pointer"
    state_cache = True         # the state cache (kevlike.model.state_cache) reads this readout

    def __init__(self, head: PointerHead):
        self.head = head

    def layout(self, option_mode: str) -> str:
        """How a choice question's options are laid out in ``option_mode``: as asked."""
        return option_mode

    def encode(self, encoder: Encoder, request: Request, option_mode: str) -> EncodedRequest:
        return encoder.encode(request, option_mode)

    @property
    def abstain(self) -> bool:
        """Whether the head reads ``x_abstain`` (its none key, :class:`PointerHead`)."""
        return self.head.abstain

    def logits(self, model: nn.Module, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """``[B, NB, K]`` float32 pointer logits, ``-inf`` on padding."""
        return pointer_logits(self.head, hidden, batch)

    def none_logits(self, model: nn.Module, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor | None:
        """``[B, NB]`` float32 none-key logits (:func:`pointer_none_logits`), None without the capability."""
        return pointer_none_logits(self.head, hidden, batch) if self.head.abstain else None

    def temperature_mode(self, option_mode: str) -> str:
        """The option mode whose temperatures (``choice`` or ``choice:set``) calibrate its answers."""
        return option_mode


class LMReadout:
    """The training-free baseline: the backbone's own mean log-probability of each option's answer text
    (:func:`lm_option_scores`), on the plain-text template; every answer is its own sub-branch whatever the
    option mode, so it is order-free in both, and its temperatures are the plain ``choice`` ones.

    Args:
        abstain: also read ``x_abstain`` from the none answer's score (:func:`lm_none_scores`), one more
            sub-branch per question in the same pass (a model whose manifest declares the capability).
    """

    name = "lm"
    state_cache = False
    head = None

    def __init__(self, abstain: bool = False):
        self.abstain = bool(abstain)

    def none_logits(self, model: nn.Module, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor | None:
        """``[B, NB]`` float32 none-answer scores (:func:`lm_none_scores`), None without the capability."""
        return lm_none_scores(hidden, batch, model.get_output_embeddings()) if self.abstain else None

    def layout(self, option_mode: str) -> str:
        return "set"

    def encode(self, encoder: Encoder, request: Request, option_mode: str) -> EncodedRequest:
        return encoder.encode_lm(request, abstain=self.abstain)

    def logits(self, model: nn.Module, hidden: torch.Tensor, batch: PackedBatch) -> torch.Tensor:
        """``[B, NB, K]`` float32 mean log-probabilities, ``-inf`` on padding."""
        return lm_option_scores(hidden, batch, model.get_output_embeddings())

    def temperature_mode(self, option_mode: str) -> str:
        return "list"


def readout_for(head: PointerHead | None, lm_abstain: bool = False) -> PointerReadout | LMReadout:
    """The readout of a model: its pointer head's, or the LM readout when it has none (reading ``x_abstain``
    with ``lm_abstain``, :class:`LMReadout`).

    Raises:
        ValueError: ``lm_abstain`` with a pointer head (its none key is the head's)."""
    if head is not None and lm_abstain:
        raise ValueError("lm_abstain is for the LM readout; a pointer head reads x_abstain with its none key")
    return LMReadout(lm_abstain) if head is None else PointerReadout(head)
