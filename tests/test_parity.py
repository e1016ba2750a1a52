"""Packed == separate, isolation, order-independence and batching (PITFALLS #1, #3, #4), fp32,
on tiny random Qwen2 and Llama models with both readouts."""

import copy
from dataclasses import replace

import pytest
import torch

from kevlike.request.encode import EncodedRequest
from kevlike.eval.parity import answer_probabilities
from kevlike.request.pack import pack
from kevlike.request.schema import validate_request

from tiny import REQUEST, make_engine

ARCHS = ["qwen2", "llama"]
READOUTS = ["pointer", "lm"]


all_probs = answer_probabilities  # {(question id, option key): p} over every answer


def max_abs_diff(a, b):
    pa, pb = all_probs(a), all_probs(b)
    assert pa.keys() == pb.keys()
    return max(abs(pa[k] - pb[k]) for k in pa)


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("readout", READOUTS)
@pytest.mark.parametrize("backend", ["sdpa", "kevlike_packed"])
def test_packed_equals_separate(arch, readout, backend):
    engine = make_engine(arch, readout, backend=backend)
    packed = engine.decide(REQUEST)
    separate = engine.decide(REQUEST, mode="separate")
    assert max_abs_diff(packed, separate) <= 1e-5
    # and the distributions are not trivially uniform (the test can fail)
    assert max(abs(p - 0.5) for (q, k), p in all_probs(packed).items() if q == "urgent") > 1e-4


@pytest.mark.parametrize("readout", READOUTS)
def test_packed_equals_separate_with_sliding_window(readout):
    """Qwen2 with sliding-window layers (window 8 < every branch's distance to the state): the window
    must be computed on restarted positions, or later branches see a different window."""
    engine = make_engine("qwen2", readout, sliding_window=8)
    packed = engine.decide(REQUEST)
    separate = engine.decide(REQUEST, mode="separate")
    assert max_abs_diff(packed, separate) <= 1e-5


def logits_without_mask(engine, enc):
    """Pointer logits when no attention mask is passed: the failure mode of PITFALLS #1."""
    from kevlike.model.heads import pointer_logits

    batch = pack([enc], engine.encoder.pad_id)
    out = engine.model.get_decoder()(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False)
    return pointer_logits(engine.head, out.last_hidden_state, batch)[0]


@torch.inference_mode()
def test_restarted_positions_without_mask_would_break_parity():
    """Shows the parity test is sensitive: with restarted positions but no mask, transformers infers
    packed documents and branches 2+ lose the state. Our path always passes the mask."""
    engine = make_engine("llama", "pointer", backend="sdpa")
    enc = engine.encode(validate_request(REQUEST))
    z_nomask = logits_without_mask(engine, enc)
    z_sep = [engine.question_logits([enc.only_question(q)])[0][0] for q in range(enc.n_questions)]
    z_packed = engine.question_logits([enc])[0]
    for q in range(enc.n_questions):
        assert torch.allclose(z_packed[q], z_sep[q], atol=1e-5)
    K = [len(z) for z in z_sep]
    assert max((z_nomask[q, :K[q]] - z_sep[q]).abs().max().item() for q in range(1, enc.n_questions)) > 1e-3


@pytest.mark.parametrize("arch", ARCHS)
@torch.inference_mode()
def test_changing_branch_2_leaves_branch_1_bit_identical(arch):
    engine = make_engine(arch, "pointer")
    enc = engine.encode(validate_request(REQUEST))
    b2 = enc.branches[1]
    # same length, different ids everywhere except the delimiter positions read by the head
    keep = {b2.decide, *b2.options}
    new_ids = tuple(i if j in keep else (i * 7 + 3) % 250 for j, i in enumerate(b2.ids))
    assert new_ids != b2.ids
    changed = EncodedRequest(enc.state_ids, (enc.branches[0], replace(b2, ids=new_ids),
                                             *enc.branches[2:]), enc.n_questions)
    z_a = engine.question_logits([enc])[0]
    z_b = engine.question_logits([changed])[0]
    assert torch.equal(z_a[0], z_b[0]) and torch.equal(z_a[2], z_b[2])
    assert not torch.equal(z_a[1], z_b[1])


def test_changing_question_text_leaves_other_answers_identical():
    engine = make_engine("qwen2", "pointer")
    other = copy.deepcopy(REQUEST)
    other["questions"]["team"]["instructions"] = "Who is in the best position to help?"
    a, b = all_probs(engine.decide(REQUEST)), all_probs(engine.decide(other))
    for key in a:
        if key[0] != "team":
            assert abs(a[key] - b[key]) <= 1e-6, key
    assert max(abs(a[k] - b[k]) for k in a if k[0] == "team") > 1e-4


@pytest.mark.parametrize("arch,window", [("llama", None), ("qwen2", 8)])
@torch.inference_mode()
def test_lm_readout_equals_stock_model_log_probs(arch, window):
    """The LM readout (answers packed as sub-branches after a shared prompt, all questions in one
    pass) equals the mean log-probability that the stock model, run plainly on each
    ``[state][prompt][answer]`` text, gives the answer tokens."""
    engine = make_engine(arch, "lm", sliding_window=window)
    enc = engine.encode(validate_request(REQUEST))
    packed = engine.question_logits([enc])[0]
    lm = engine.model
    for q, branch in enumerate(enc.branches):
        for k, answer in enumerate(branch.answers):
            ids = torch.tensor([[*enc.state_ids, *branch.ids, *answer]])
            logp = torch.log_softmax(lm(input_ids=ids).logits[0].float(), -1)   # (T, V)
            n = len(answer)
            T = ids.shape[1]
            want = logp[T - n - 1:T - 1].gather(1, ids[0, T - n:, None]).mean()
            assert abs(packed[q][k].item() - want.item()) <= 1e-5, (q, k)


@pytest.mark.parametrize("arch,window", [("llama", None), ("qwen2", None), ("qwen2", 8)])
@torch.inference_mode()
def test_single_branch_equals_stock_model_forward(arch, window):
    """Our mask + positions on a lone ``[state][branch]`` reproduce the stock model's own causal
    (and sliding-window) forward: the separate reference path is the model as trained."""
    engine = make_engine(arch, "pointer", sliding_window=window)
    enc = engine.encode(validate_request(REQUEST)).only_question(1)
    batch = pack([enc], engine.encoder.pad_id)
    ours = engine.hidden_states(batch.input_ids, batch.segment_ids, batch.position_ids)
    stock = engine.model.get_decoder()(input_ids=batch.input_ids, use_cache=False).last_hidden_state
    assert batch.input_ids.shape[1] > 3 * (window or 0)
    assert torch.allclose(ours, stock, atol=1e-5)


@pytest.mark.parametrize("readout", READOUTS)
def test_question_order_changes_no_answer(readout):
    engine = make_engine("llama", readout)
    reordered = dict(REQUEST, questions=dict(reversed(list(REQUEST["questions"].items()))))
    a, b = engine.decide(REQUEST), engine.decide(reordered)
    assert list(b["answers"]) == list(reordered["questions"])  # answers follow the request's order
    assert max_abs_diff(a, b) <= 1e-6


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("readout", READOUTS)
@pytest.mark.parametrize("side", ["right", "left"])
@torch.inference_mode()
def test_batched_with_padding_equals_alone(arch, readout, side):
    engine = make_engine(arch, readout)
    small = {"state": "The lazy dog.", "questions": {"q": {"type": "noul", "instructions": "Is a dog mentioned?"}}}
    encs = [engine.encode(validate_request(r)) for r in (small, REQUEST)]
    alone = [engine.question_logits([e])[0] for e in encs]
    batched = engine.question_logits(encs, padding_side=side)
    for za, zb in zip(alone, batched):
        for qa, qb in zip(za, zb):
            assert torch.allclose(qa, qb, atol=1e-5), (qa, qb)
    # the gathered indices land on the right tokens, not on padding
    batch = pack(encs, engine.encoder.pad_id, padding_side=side)
    if readout == "pointer":
        dec = batch.input_ids.gather(1, batch.decide_index)[batch.branch_mask]
        assert (dec == engine.encoder.decide_id).all()
        opt = batch.input_ids[torch.arange(2)[:, None, None].expand_as(batch.option_index), batch.option_index]
        assert (opt[batch.option_mask] == engine.encoder.end_opt_id).all()


def test_decide_batch_equals_decide():
    engine = make_engine("qwen2", "pointer")
    small = {"state": "The lazy dog.", "questions": {"q": {"type": "noul", "instructions": "Is a dog mentioned?"}}}
    out = engine.decide_batch([small, REQUEST])
    assert max_abs_diff(out[0], engine.decide(small)) <= 1e-5
    assert max_abs_diff(out[1], engine.decide(REQUEST)) <= 1e-5


def test_padded_batch_gives_finite_outputs_and_gradients():
    engine = make_engine("llama", "pointer", backend="sdpa")  # the training path
    small = {"state": "dog", "questions": {"q": {"type": "noul", "instructions": "fox?"}}}
    encs = [engine.encode(validate_request(r)) for r in (small, REQUEST)]
    batch = pack(encs, engine.encoder.pad_id)
    assert (batch.segment_ids == -1).any()
    from kevlike.model.heads import pointer_logits

    hidden = engine.hidden_states(batch.input_ids, batch.segment_ids, batch.position_ids)
    assert torch.isfinite(hidden).all()
    z = pointer_logits(engine.head, hidden, batch)
    loss = -torch.log_softmax(z[batch.branch_mask], -1)[:, 0].sum()
    loss.backward()
    grads = [p.grad for p in [*engine.model.parameters(), *engine.head.parameters()] if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)


def test_engine_refuses_backends_that_misread_the_mask():
    with pytest.raises(ValueError, match="eager"):
        make_engine("llama", "pointer", backend="eager")


def test_question_logits_builds_no_autograd_graph():
    """Inference paths keep no activations for backward (a grad-enabled forward of a 2k-token
    request on the real backbone held >20 GB and was OOM-killed in the benchmark)."""
    engine = make_engine("llama", "pointer")
    z = engine.question_logits([engine.encode(validate_request(REQUEST))])[0]
    assert all(t.is_inference() and not t.requires_grad for t in z)
