"""Tiny random Qwen2 / Llama models and an in-memory byte-level BPE tokenizer (nothing downloaded)."""

from __future__ import annotations

import torch

from kevlike import Engine
from kevlike.eval.parity import answer_probabilities
from kevlike.model.heads import PointerHead

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Customer: I was charged twice for my March invoice and nobody answers the phone.",
    "Does this need a reply within the hour? Which team should handle this? billing sales tech",
    "How angry is the customer? Calm Frustrated Very angry true false yes no Options Answer",
    "Text: Question: Levels (0 = lowest, 1 = highest): 0 1 2 3 4 5 6 7 8 9 { } [ ] \" : ,",
]


def max_dp(a: dict, b: dict) -> float:
    """The largest |Δp| between two responses to the same request, over every probability of every answer
    (a noul answer counts P(true) and P(false)); fails (AssertionError) when they answer different questions."""
    pa, pb = answer_probabilities(a), answer_probabilities(b)
    assert pa.keys() == pb.keys(), (sorted(pa), sorted(pb))
    return max(abs(pa[k] - pb[k]) for k in pa)


def p_right_by_hand(a: dict) -> float:
    """P(right) of a served answer, by hand: (1 − x_abstain) × its top option's probability."""
    top = max(a["noul"], 1 - a["noul"]) if a["type"] == "noul" else max(a["probabilities"].values())
    return (1 - a["x_abstain"]) * top


def make_tokenizer():
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS * 20, vocab_size=400, min_frequency=1,
                            special_tokens=["<|pad|>", "<|im_end|>"], show_progress=False)
    return PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer, pad_token="<|pad|>", eos_token="<|im_end|>")


def make_model(arch: str, vocab: int = 420, sliding_window: int | None = None, seed: int = 0):
    """A tiny randomly initialised model of a real architecture (fp32, eval mode, sdpa)."""
    from transformers import AutoModelForCausalLM, LlamaConfig, Qwen2Config

    common = dict(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096)
    if arch == "qwen2":
        if sliding_window:
            cfg = Qwen2Config(**common, use_sliding_window=True, sliding_window=sliding_window, max_window_layers=1)
        else:
            cfg = Qwen2Config(**common)
    elif arch == "llama":
        cfg = LlamaConfig(**common)
    else:
        raise ValueError(arch)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, attn_implementation="sdpa").eval()


def make_engine(arch: str = "llama", readout: str = "pointer", sliding_window: int | None = None,
                abstain: bool = False, **kw) -> Engine:
    """A tiny engine; ``abstain``: its pointer head reads ``x_abstain`` (a random none key and bias 0.3, so the
    readout is not the trivial all-zero one), or its LM readout reads the none answer (``readout="lm"``)."""
    model = make_model(arch, sliding_window=sliding_window)
    tok = make_tokenizer()
    head = None
    if readout == "pointer":
        torch.manual_seed(1)
        head = PointerHead(model.config.hidden_size, abstain=abstain).eval()
        if abstain:
            with torch.no_grad():
                head.w_none.normal_()
                head.b_none.fill_(0.3)
    # one fixed thread: tests compare logits of two calls bit for bit, and ``threads="auto"`` may pick another
    # thread count between the calls on a busy machine (another reduction order)
    kw.setdefault("threads", 1)
    return Engine(model, tok, name=f"tiny-{arch}", head=head, lm_abstain=abstain and readout == "lm", **kw)


REQUEST = {
    "model": "kevlike-default",
    "state": "Customer: I was charged twice for my March invoice and nobody answers the phone.",
    "questions": {
        "urgent": {"type": "noul", "instructions": "Does this need a reply within the hour?",
                   "criteria": {"true": "customer is blocked or losing money", "false": None}},
        "team": {"type": "choice", "instructions": "Which team should handle this?",
                 "criteria": {"billing": "invoices, charges, refunds", "sales": None, "tech": None}},
        "anger": {"type": "score", "instructions": "How angry is the customer?",
                  "criteria": ["Calm", "Frustrated", "Very angry"]},
        "lazy": {"type": "noul", "instructions": "Is a fox mentioned?"},
    },
}


def save_tiny_model(path, arch: str = "llama") -> str:
    """Save a tiny random model and its tokenizer as an HF directory (servable with --model DIR)."""
    model = make_model(arch)
    tok = make_tokenizer()
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return str(path)


def fit(model, batch, aux, cfg, *, steps: int, lr: float, term: str = "ce", after_backward=None):
    """``steps`` Adam steps at rate ``lr`` on ``model``'s trainable parameters, each on the whole of ``batch`` with
    the training loss (:func:`kevlike.training.train.loss_terms`), in whatever mode (train/eval) the caller left the
    model. ``after_backward()``, if given, runs after each backward, before the step. Returns ``(first, terms)``:
    the ``term`` loss of the first step (a float) and the last step's terms."""
    from kevlike.training.train import loss_terms

    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=lr)
    first = terms = None
    for _ in range(steps):
        terms = loss_terms(model(batch), batch, aux, cfg)
        first = first if first is not None else terms[term].item()
        terms["loss"].backward()
        if after_backward is not None:
            after_backward()
        opt.step()
        opt.zero_grad()
    return first, terms
