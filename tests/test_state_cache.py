"""The state cache (kevlike/model/state_cache.py): answers equal the uncached packed path (hit, grown
prefix, miss), the LRU respects its memory cap, responses say how many tokens came from the cache."""

import pytest
import torch

from kevlike.model.state_cache import StateCache, cache_nbytes

from tiny import REQUEST, make_engine, max_dp


@pytest.mark.parametrize("arch", ["llama", "qwen2"])
@pytest.mark.parametrize("orders", [1, 3])
def test_cached_equals_packed_on_miss_hit_and_grown_state(arch, orders):
    ref = make_engine(arch, option_orders=orders)
    eng = make_engine(arch, option_orders=orders, state_cache_mb=64)
    first = eng.decide(REQUEST)
    assert first["x_cached_tokens"] == 0 and len(eng.state_cache) == 1
    assert max_dp(first, ref.decide(REQUEST)) <= 1e-5
    other = dict(REQUEST, questions={"q": {"type": "noul", "instructions": "Is the customer angry?"}})
    second = eng.decide(other)
    S = len(eng.prepare(other).encoded.state_ids)
    assert second["x_cached_tokens"] == S and eng.state_cache.hits == 1
    assert max_dp(second, ref.decide(other)) <= 1e-5
    assert second["usage"] == ref.decide(other)["usage"]            # input_tokens: what the request holds
    grown = dict(REQUEST, state=REQUEST["state"] + " Also, the refund never arrived.")
    third = eng.decide(grown)
    assert third["x_cached_tokens"] == S and eng.state_cache.prefix_hits == 1 and len(eng.state_cache) == 2
    assert max_dp(third, ref.decide(grown)) <= 1e-5
    assert "x_cached_tokens" not in ref.decide(REQUEST)             # no cache, no field


def test_lru_eviction_by_memory_cap():
    eng = make_engine("llama", state_cache_mb=64)
    eng.decide(REQUEST)
    one = cache_nbytes(next(iter(eng.state_cache._entries.values()))[0])
    # tiny Llama: 3 layers × (k, v) × 2 kv heads × 16 dims × 4 bytes = 768 bytes per state token
    S = len(next(iter(eng.state_cache._entries)))
    assert one == 768 * S
    cache = StateCache(max_mb=2.5 * one / 2 ** 20)                    # room for two such states
    for i, key in enumerate([(1,), (2,), (3,)]):
        cache.put(key, next(iter(eng.state_cache._entries.values()))[0])
        if i == 1:
            cache.lookup((1,))                                         # (1,) used: (2,) is now the oldest
    assert list(cache._entries) == [(1,), (3,)] and cache.bytes == 2 * one
    cache.put((9,) * 10, next(iter(eng.state_cache._entries.values()))[0])
    tiny = StateCache(max_mb=one / 2 ** 20 / 2)
    tiny.put((1,), next(iter(eng.state_cache._entries.values()))[0])
    assert len(tiny) == 0                                              # larger than the whole cap: not kept
    with pytest.raises(ValueError, match="state cache size must be a finite number of MB >= 0"):
        StateCache(-1)



def _held_bytes(cache) -> int:
    """Bytes of storage the key/value tensors of a transformers cache keep alive (each storage once)."""
    storages = {}
    for layer in cache.layers:
        for t in (layer.keys, layer.values):
            storages[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
    return sum(storages.values())


def test_counted_bytes_are_the_bytes_held():
    # issue 32: the branches used to extend the cached entry in place and crop it back, leaving each entry a view
    # that pinned the whole [state + branches] buffer while only the state's bytes were counted
    eng = make_engine("llama", state_cache_mb=64)
    long_q = {f"q{i}": {"type": "noul", "instructions": "Does this need a reply within the hour? " * 6}
              for i in range(6)}
    for req in (REQUEST, dict(REQUEST, questions=long_q),                       # miss, then a hit
                dict(REQUEST, state=REQUEST["state"] + " Also, the refund never arrived.", questions=long_q)):
        eng.decide(req)                                                         # ... then a grown prefix
    assert len(eng.state_cache) == 2
    held = 0
    for ids, (kv, counted) in eng.state_cache._entries.items():
        assert _held_bytes(kv) == counted == 768 * len(ids)                   # 768 bytes per state token (tiny Llama)
        held += counted
    assert eng.state_cache.bytes == held
    # a view handed to put is stored as a compact copy and counted at its own size
    kv = next(iter(eng.state_cache._entries.values()))[0]
    S = kv.get_seq_length()
    from transformers import DynamicCache
    wide = DynamicCache()
    for i, layer in enumerate(kv.layers):
        wide.update(torch.cat([layer.keys, layer.keys], dim=-2), torch.cat([layer.values, layer.values], dim=-2), i)
    wide.crop(-S)                                                               # a view of S tokens into 2 S
    assert _held_bytes(wide) == 2 * 768 * S
    cache = StateCache(max_mb=1)
    cache.put((1,), wide)
    assert cache.bytes == _held_bytes(cache._entries[(1,)][0]) == 768 * S


def test_longest_prefix_wins():
    cache = StateCache(max_mb=1)
    a, b = object(), object()
    cache.bytes = 0
    cache._entries[(1, 2)] = (a, 0)
    cache._entries[(1, 2, 3, 4)] = (b, 0)
    assert cache.lookup((1, 2, 3, 4, 5)) == (4, b)
    assert cache.lookup((1, 2, 9)) == (2, a)
    assert cache.lookup((7,)) == (0, None)
    assert (cache.hits, cache.prefix_hits, cache.misses) == (0, 2, 1)


def test_refused_where_it_cannot_be_exact():
    with pytest.raises(ValueError, match="sliding-window"):
        make_engine("qwen2", sliding_window=8, state_cache_mb=8)
    with pytest.raises(ValueError, match="pointer readout"):
        make_engine("llama", readout="lm", state_cache_mb=8)


@pytest.mark.backbone
def test_cached_equals_packed_on_the_default_model(default_engine):
    import json
    from pathlib import Path

    from kevlike import Engine

    req = json.loads((Path(__file__).resolve().parents[1] / "examples" / "review.json").read_text())
    eng = Engine.from_pretrained("kevlike-default", state_cache_mb=64)
    assert eng.decide(req)["x_cached_tokens"] == 0
    again = dict(req, questions={"angry": {"type": "noul", "instructions": "Is the author angry?"}})
    out = eng.decide(again)
    assert out["x_cached_tokens"] == len(eng.prepare(again).encoded.state_ids) == 184
    assert max_dp(out, default_engine.decide(again)) <= 1e-5
    assert max_dp(eng.decide(req), default_engine.decide(req)) <= 1e-5
