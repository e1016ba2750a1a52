"""Token ids of a request: one encoder, shared by serving and training (DESIGN.md §2, §5).

Reserved delimiters are added to the tokenizer as special tokens and inserted *as ids*; user text
(state, instructions, keys, descriptions) is tokenized with ``split_special_tokens=True``, so a
literal ``</opt><opt>`` or ``<|im_end|>`` in user text becomes ordinary tokens and can never create
an option slot (PITFALLS.md #5). Each text piece is tokenized on its own, in one batched call, so
the ids of a piece never depend on its neighbours (PITFALLS.md #6; pinned by a golden-ids test).
"""

from __future__ import annotations

import math
import random
import threading
from dataclasses import dataclass, replace

from kevlike.config.engine import OPTION_MODES
from kevlike.request.render import LM_ABSTAIN_ANSWER, lm_answers, lm_prompt, lm_state, option_text, render_text
from kevlike.request.schema import DEFAULT_LIMITS, Limits, Question, Request, RequestError

DELIMITERS = ("<state>", "<q>", "<opt>", "</opt>", "<decide>")


def check_option_mode(mode: str, name: str = "option_mode") -> str:
    """Validate an option mode and return it.

    Raises:
        ValueError: not one of :data:`OPTION_MODES`.
    """
    if mode not in OPTION_MODES:
        raise ValueError(f"{name} must be one of {', '.join(OPTION_MODES)}, got {mode!r}")
    return mode


@dataclass(frozen=True)
class EncodedBranch:
    """One branch's token ids and the local indices its readout reads.

    Pointer template, list mode: ``ids`` is the whole branch, ``decide`` the index of ``<decide>`` and
    ``options`` the index of each option's ``</opt>``, in option order. Set mode: ``ids`` is
    ``<q> instructions <decide>`` and each option ``<opt> key: description </opt>`` is a sub-branch in
    ``answers`` (request order), read at its last token.

    LM template: ``ids`` is the question prompt, ``decide`` its last token, and ``answers`` holds each
    option's answer tokens as a *sub-branch* packed after the prompt: it sees the state, the prompt
    and itself, not the other answers, and its positions restart right after the prompt — exactly
    the positions and context of a separate ``[state][prompt][answer]`` run, with the prompt encoded once.
    ``none`` (LM template with ``x_abstain``) holds the tokens of :data:`~kevlike.request.render.LM_ABSTAIN_ANSWER`,
    one more sub-branch after the answers, read like them and seen by none of them (empty without the capability).
    ``question`` is the index of the question in the request. ``order`` (pointer template) is the
    request index of the option in each slot (``()``: the request's own order); a question encoded
    in several orders has one branch per order (see :func:`option_orders`).
    """

    ids: tuple[int, ...]
    decide: int
    options: tuple[int, ...] = ()
    answers: tuple[tuple[int, ...], ...] = ()
    question: int = 0
    order: tuple[int, ...] = ()
    none: tuple[int, ...] = ()

    @property
    def n_tokens(self) -> int:
        return len(self.ids) + sum(len(a) for a in self.answers) + len(self.none)

    @property
    def span(self) -> int:
        """Positions the branch occupies after the state (prompt + longest sub-branch)."""
        return len(self.ids) + max((len(a) for a in (*self.answers, self.none)), default=0)


@dataclass(frozen=True)
class EncodedRequest:
    state_ids: tuple[int, ...]
    branches: tuple[EncodedBranch, ...]
    n_questions: int

    @property
    def n_tokens(self) -> int:
        """Tokens of the packed sequence (state once, every branch once)."""
        return len(self.state_ids) + sum(b.n_tokens for b in self.branches)

    def only_question(self, q: int) -> "EncodedRequest":
        """The same state with only question ``q``'s branch (renumbered to question 0): the
        separate ``[state][branch]`` run that a packed branch must equal."""
        branches = tuple(replace(b, question=0) for b in self.branches if b.question == q)
        return EncodedRequest(self.state_ids, branches, 1)


def option_orders(question: Question, n: int) -> list[tuple[int, ...]]:
    """The option orders a question is encoded in; each order lists request option indices, slot by slot.

    A causal decoder reads the options one after another, so its answer can depend on their order;
    a choice question's options are an unordered set (score levels are ordered, noul options fixed).

    * ``n = 0``: the request's order, one branch (the training template).
    * ``n ≥ 1``, choice questions: the *canonical* order (options sorted by their rendered text
      ``key: description``, then by key), then its reverse, then ``n − 2``
      shuffles of it with fixed seeds. Every order is a function of the option *set*, so the branch
      tokens — and hence the answer — do not depend on the order the request lists the options in.
      The engine pools the orders' log-probabilities (mean of ``log_softmax``, a log-linear pool),
      which also averages out the model's position bias.
    * noul and score questions: always the request's order, one branch.

    Raises:
        ValueError: ``n < 0``.
    """
    if n < 0:
        raise ValueError(f"option orders must be >= 0, got {n}")
    K = len(question.options)
    if n == 0 or question.type != "choice":
        return [tuple(range(K))]
    canonical = tuple(sorted(range(K), key=lambda i: (option_text(question.options[i]), question.options[i].key)))
    orders = [canonical]
    if n >= 2 and K >= 2:
        orders.append(canonical[::-1])
    target = min(n, math.factorial(min(K, 10)))  # never more orders than distinct ones
    seed = 0
    while len(orders) < target:
        o = list(canonical)
        random.Random(1000 * K + seed).shuffle(o)
        seed += 1
        if tuple(o) not in orders:
            orders.append(tuple(o))
    return orders


def _tokens_exceeded(loc: list, msg: str) -> RequestError:
    """The 413 :class:`RequestError` of a token budget (never a truncation)."""
    return RequestError([{"loc": loc, "type": "tokens_exceeded", "msg": msg}], status=413)


TOKENIZE_CHUNK_CHARS = 65_536
"""Characters of text tokenized per hold of the tokenizer lock (see :meth:`Encoder.text_ids`)."""


class Encoder:
    """Turns validated :class:`~kevlike.request.schema.Request` objects into token ids.

    Args:
        tokenizer: a Hugging Face tokenizer; the delimiters of :data:`DELIMITERS` are added to it as
            special tokens if missing (the caller resizes the model's embeddings, see
            :func:`kevlike.model.backbones.ensure_embedding_rows`).
        context_limit: the backbone's trained context (``max_position_embeddings``); the state plus the
            longest branch must fit ``min(limits.max_branch_context, context_limit)`` tokens.
        limits: request limits; the packed sequence must fit ``limits.max_request_tokens``.
        option_orders: the orders each choice question is encoded in (pointer template), see
            :func:`option_orders`; 0 (the default, used by training) keeps the request's order.
            Ignored for choice questions in set mode (one branch, no order).
        option_mode: ``"list"`` (default) or ``"set"``: how choice questions are encoded (see
            :meth:`encode`); noul and score questions are always read as a list.
    """

    def __init__(self, tokenizer, context_limit: int | None = None, limits: Limits = DEFAULT_LIMITS,
                 option_orders: int = 0, option_mode: str = "list"):
        self.option_orders = option_orders
        self.option_mode = check_option_mode(option_mode)
        vocab = tokenizer.get_vocab()            # a fresh dict of the whole vocabulary per call: read it once
        missing = [t for t in DELIMITERS if t not in vocab]
        if missing:
            tokenizer.add_special_tokens({"extra_special_tokens": list(DELIMITERS)},
                                         replace_extra_special_tokens=False)
        self.tokenizer = tokenizer
        ids = tokenizer.convert_tokens_to_ids(list(DELIMITERS))
        self.state_id, self.q_id, self.opt_id, self.end_opt_id, self.decide_id = ids
        self.delimiter_ids = tuple(ids)
        self.limits = limits
        # fast tokenizers are one shared Rust object that transformers reconfigures on every call:
        # concurrent calls from threads have raised "RuntimeError: Already borrowed" (transformers
        # #47085, tokenizers #537); serialising costs nothing here and guards every version
        self._lock = threading.Lock()
        self.branch_limit = min(limits.max_branch_context, context_limit or limits.max_branch_context)
        pad = tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (tokenizer.eos_token_id or 0)
        # the most UTF-8 bytes one token can stand for (an over-estimate for byte-level and byte-fallback
        # vocabularies, whose token strings spell a byte with 2-6 characters): text of B bytes is at
        # least ceil(B / max_token_bytes) tokens, which refuses a huge body before tokenizing it
        self.max_token_bytes = max(len(t.encode("utf-8", "surrogatepass")) for t in [*vocab, *missing]) or 1

    def min_tokens(self, text: str) -> int:
        """A lower bound on the tokens of ``text``, without tokenizing: ``ceil(bytes / max_token_bytes)``."""
        return -(-len(text.encode("utf-8", "surrogatepass")) // self.max_token_bytes)

    def precheck(self, texts: list[str]) -> None:
        """Refuse (413) a request whose texts cannot fit the budgets whatever their tokenization: the
        state alone (``texts[0]``) over the branch context, or all texts together over
        ``limits.max_request_tokens``. Cheap (a byte count), and run before the tokenizer, which is
        serialised: one huge body must not hold up other requests for seconds."""
        state = self.min_tokens(texts[0])
        if state + 2 > self.branch_limit:
            size = len(texts[0].encode("utf-8", "surrogatepass"))
            raise _tokens_exceeded(["body", "state"], f"state is at least {state} tokens ({size} bytes); the limit for "
                                   f"state + longest branch is {self.branch_limit} tokens (the backbone's context)")
        total = state + sum(self.min_tokens(t) for t in texts[1:])
        if total > self.limits.max_request_tokens:
            raise _tokens_exceeded(["body"], f"request is at least {total} tokens (state + all branches); the limit "
                                             f"is {self.limits.max_request_tokens}")

    def text_ids(self, texts: list[str], budget: int | None = None) -> list[list[int]]:
        """Token ids of each user text, with special-token splitting on (no text yields a reserved id).
        Thread-safe: the tokenizer is serialised, in chunks of at most :data:`TOKENIZE_CHUNK_CHARS`
        characters (one text at least) with the lock released in between, so a request of thousands of
        questions does not hold up other requests' tokenization for seconds.

        Raises:
            RequestError: 413 as soon as the texts tokenized so far exceed ``budget`` tokens (a lower
                bound of the packed length: counting stops there).
        """
        out: list[list[int]] = []
        total, i = 0, 0
        while i < len(texts):
            j, size = i + 1, len(texts[i])
            while j < len(texts) and size + len(texts[j]) <= TOKENIZE_CHUNK_CHARS:
                size += len(texts[j])
                j += 1
            with self._lock:
                ids = self.tokenizer(texts[i:j], add_special_tokens=False, split_special_tokens=True)["input_ids"]
            out.extend(list(x) for x in ids)
            total += sum(len(x) for x in ids)
            if budget is not None and total > budget:
                raise _tokens_exceeded(["body"], f"request is more than {total} tokens (state + all branches; counting "
                                                 f"stopped after {j} of {len(texts)} texts); the limit is {budget}")
            i = j
        return out

    # -- pointer template ------------------------------------------------------------------
    def encode(self, request: Request, option_mode: str | None = None) -> EncodedRequest:
        """Pointer-template ids: ``<state> s`` then per question and option order
        ``<q> instr (<opt> key: desc </opt>)… <decide>`` (list mode, see :func:`option_orders`).

        In set mode (``option_mode``, default the encoder's) a choice question is one branch
        ``<q> instr <decide>`` with one sub-branch ``<opt> key: desc </opt>`` per option: every option
        starts at the same position, sees the state, the question and itself, never a sibling — so an
        option's pointer logit does not depend on which other options exist or their order (DESIGN §5).

        Raises:
            RequestError: status 413 when the packed sequence or state + a branch exceeds a limit.
        """
        option_mode = self.option_mode if option_mode is None else check_option_mode(option_mode)
        texts = [render_text(request.state)]
        for q in request.questions:
            texts.append(" " + render_text(q.instructions))
            texts.extend(" " + option_text(o) for o in q.options)
        self.precheck(texts)
        pieces = iter(self.text_ids(texts, budget=self.limits.max_request_tokens))
        state_ids = (self.state_id, *next(pieces))
        branches = []
        for qi, q in enumerate(request.questions):
            instr = next(pieces)
            opts = [next(pieces) for _ in q.options]
            if option_mode == "set" and q.type == "choice":
                subs = tuple((self.opt_id, *o, self.end_opt_id) for o in opts)
                branches.append(EncodedBranch((self.q_id, *instr, self.decide_id), len(instr) + 1,
                                              answers=subs, question=qi))
                continue
            for order in option_orders(q, self.option_orders):
                ids = [self.q_id, *instr]
                opt_at = []
                for i in order:
                    ids.append(self.opt_id)
                    ids.extend(opts[i])
                    opt_at.append(len(ids))
                    ids.append(self.end_opt_id)
                ids.append(self.decide_id)
                identity = order == tuple(range(len(order)))
                branches.append(EncodedBranch(tuple(ids), len(ids) - 1, tuple(opt_at), question=qi,
                                              order=() if identity else order))
        enc = EncodedRequest(state_ids, tuple(branches), len(request.questions))
        self.check_budget(enc, request)
        return enc

    # -- LM readout template ---------------------------------------------------------------
    def encode_lm(self, request: Request, abstain: bool = False) -> EncodedRequest:
        """Plain-text ids for the LM readout: the state, then per question its prompt with one answer
        sub-branch per option (see :class:`EncodedBranch`), and with ``abstain`` one more, the none answer
        (:data:`~kevlike.request.render.LM_ABSTAIN_ANSWER`, ``EncodedBranch.none``). No reserved id appears.

        Raises:
            RequestError: status 413 as for :meth:`encode` (the none answers count in the budget).
        """
        texts = [lm_state(request.state)]
        for q in request.questions:
            texts.append(lm_prompt(q))
            texts.extend(lm_answers(q))
            if abstain:
                texts.append(LM_ABSTAIN_ANSWER)
        self.precheck(texts)
        pieces = iter(self.text_ids(texts, budget=self.limits.max_request_tokens))
        state_ids = tuple(next(pieces))
        branches = []
        for qi, q in enumerate(request.questions):
            prompt = tuple(next(pieces))
            answers = tuple(tuple(next(pieces)) for _ in q.options)
            none = tuple(next(pieces)) if abstain else ()
            branches.append(EncodedBranch(prompt, len(prompt) - 1, answers=answers, question=qi, none=none))
        enc = EncodedRequest(state_ids, tuple(branches), len(request.questions))
        self.check_budget(enc, request)
        return enc

    def check_budget(self, enc: EncodedRequest, request: Request) -> None:
        """Raise a 413 :class:`RequestError` naming the limit; never truncate."""
        total = enc.n_tokens
        if total > self.limits.max_request_tokens:
            raise _tokens_exceeded(["body"], f"request is {total} tokens packed (state + all branches); the limit is "
                                             f"{self.limits.max_request_tokens}")
        S = len(enc.state_ids)
        context = f"the limit for state + longest branch is {self.branch_limit} tokens (the backbone's context)"
        if S + 1 > self.branch_limit:
            raise _tokens_exceeded(["body", "state"], f"state is {S} tokens; {context}")
        for b in enc.branches:
            if S + b.span > self.branch_limit:
                qid = request.questions[b.question].id
                raise _tokens_exceeded(["body", "questions", qid], f"state ({S} tokens) + this question's branch "
                                       f"({b.span} tokens) = {S + b.span} tokens; the limit is {self.branch_limit} "
                                       f"(the backbone's context)")
