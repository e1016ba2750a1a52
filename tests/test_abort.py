"""An abandoned forward pass stops (kevlike/model/abort.py): when every request of a batch has timed out or lost
its client while the pass runs, the batcher abandons it at the next decoder layer, so the requests queued behind it
are answered instead of timing out too (experiments/abort_check.py on a real server: the one-token request behind a
3,000-token one answered 503 at --timeout 2 got 503 too before, 200 in 1.07 s after)."""

import asyncio
import threading
import types

import pytest

from kevlike.model.abort import PassAborted, abortable, decoder_layers, engine_modules
from kevlike.service.batcher import Batcher
from tiny import REQUEST, make_engine, max_dp


@pytest.fixture(scope="module")
def engine():
    return make_engine("llama")


def test_abortable_stops_at_the_first_layer_that_asks_and_leaves_no_hook(engine):
    layers = decoder_layers(engine_modules(engine))
    assert len(layers) == engine.model.config.num_hidden_layers >= 2
    assert all(type(layer).__name__ == "LlamaDecoderLayer" for layer in layers)
    prep = engine.prepare(REQUEST)
    want = engine.run([prep])[0]
    asked = []
    with abortable(layers, lambda: asked.append(1) or False):
        same = engine.run([prep])[0]
    assert max_dp(same, want) == 0.0                # a pass nobody aborts is the same pass
    per_pass = len(asked)
    assert per_pass >= len(layers) and per_pass % len(layers) == 0   # asked before every layer of every forward
    asked.clear()
    with abortable(layers, lambda: asked.append(1) or len(asked) > 1):
        with pytest.raises(PassAborted, match="no request in its batch is waiting"):
            engine.run([prep])
    assert len(asked) == 2                          # stopped before the second layer, not at the end of the pass
    assert all(not layer._forward_pre_hooks for layer in layers)
    assert max_dp(engine.run([prep])[0], want) == 0.0


def test_engine_modules_of_an_ensemble_are_its_members_models_once(engine):
    other = make_engine("qwen2")
    ens = types.SimpleNamespace(members=[engine, other, engine], model=None)
    assert [id(m) for m in engine_modules(ens)] == [id(engine.model), id(other.model)]
    assert engine_modules(types.SimpleNamespace(model=None)) == []


def test_the_batcher_abandons_a_pass_nobody_waits_for_and_answers_the_next_request(engine):
    """A's future is cancelled (as the server does at --timeout) once A's pass has started; the pass is abandoned,
    counted as aborted and dropped, and B, queued behind it, is answered exactly as when asked alone."""
    req_b = {**REQUEST, "state": "The invoice was paid on time."}
    want_b = engine.run([engine.prepare(req_b)])[0]
    started, cancelled = threading.Event(), threading.Event()
    real_run = engine.run

    def run(prepared):
        if prepared[0].request.state == REQUEST["state"]:
            started.set()
            assert cancelled.wait(10)
        return real_run(prepared)

    async def main():
        b = Batcher(types.SimpleNamespace(run=run, model=engine.model), max_wait_s=0)
        b.start()
        fa = b.submit(engine.prepare(REQUEST))
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        fb = b.submit(engine.prepare(req_b))
        fa.cancel()
        cancelled.set()
        got_b = await asyncio.wait_for(fb, 30)
        await b.stop()
        return b, got_b

    b, got_b = asyncio.run(main())
    assert (b.aborted, b.dropped, b.batches, b.batched) == (1, 1, 1, 1)
    assert max_dp(got_b, want_b) < 1e-6
    assert all(not layer._forward_pre_hooks for layer in decoder_layers([engine.model]))


def test_a_pass_with_one_request_still_waiting_runs_to_the_end(engine):
    async def main():
        b = Batcher(engine, max_wait_s=0.05, max_batch=2)
        b.start()
        fa, fb = b.submit(engine.prepare(REQUEST)), b.submit(engine.prepare(REQUEST))
        fa.cancel()                                  # gone before the pass: dropped, B still answered
        got = await asyncio.wait_for(fb, 30)
        await b.stop()
        return b, got

    b, got = asyncio.run(main())
    assert (b.aborted, b.dropped, b.batched) == (0, 1, 1)
    assert max_dp(got, engine.run([engine.prepare(REQUEST)])[0]) < 1e-6
