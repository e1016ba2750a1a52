"""kevlike/config: settings that validate themselves, name the refused field, and build the command line."""

import dataclasses
import math
import subprocess
import sys

import pytest

from kevlike.config.engine import DEFAULT_OPTIONS, MAX_OPTION_ORDERS, EngineOptions, threads_from_env
from kevlike.config.fields import SettingError, build, flag, leaves
from kevlike.config.limits import Limits
from kevlike.config.server import ServerConfig


@pytest.mark.parametrize("field,value,message", [
    ("state_cache_mb", math.nan, "state_cache_mb must be a number of MiB from 0 to 1073741824 (0 turns it off), got nan"),
    ("state_cache_mb", math.inf, "state_cache_mb must be a number of MiB from 0 to 1073741824 (0 turns it off), got inf"),
    ("state_cache_mb", -1.0, "state_cache_mb must be a number of MiB from 0 to 1073741824 (0 turns it off), got -1"),
    ("state_cache_mb", 1e303, "state_cache_mb must be a number of MiB from 0 to 1073741824 (0 turns it off), got "
                              "1e+303"),   # its byte count overflowed a traceback out of a started server
    ("option_orders", 25, "option_orders must be at most 24 (each order is one more branch per choice question in "
                          "the forward pass), got 25"),
    ("option_orders", -1, "option_orders must be >= 0, got -1"),
    ("option_orders", True, "option_orders must be an integer from 0 to 24, got True"),
    ("option_orders", 1.0, "option_orders must be an integer from 0 to 24, got 1"),
    ("abstain_above", math.nan, "abstain_above must be a probability from 0 to 1, got nan"),
    ("abstain_above", 1.5, "abstain_above must be a probability from 0 to 1, got 1.5"),
    ("p_right_below", -0.5, "p_right_below must be a probability from 0 to 1, got -0.5"),
    ("threads", 0, "threads must be 'auto' or an integer from 1 to 256, got 0"),
    ("dtype", "fp16", "dtype must be one of auto, float32, bfloat16, got 'fp16'"),
    ("option_mode", "bag", "option_mode must be one of list, set, got 'bag'"),
    ("script_policy", "drop", "script_policy must be one of annotate, refuse, got 'drop'"),
])
def test_engine_options_refuse_bad_values_naming_the_field(field, value, message):
    with pytest.raises(SettingError) as e:
        EngineOptions(**{field: value})
    assert str(e.value) == message and e.value.field == field
    assert isinstance(e.value, ValueError)


def test_engine_options_are_frozen_and_accept_the_edges():
    opts = EngineOptions(option_orders=MAX_OPTION_ORDERS, abstain_above=0, state_cache_mb=0, threads="auto")
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.option_orders = 1
    assert dataclasses.replace(opts, option_orders=0).option_orders == 0
    with pytest.raises(SettingError, match="^option_orders must be >= 0"):
        dataclasses.replace(opts, option_orders=-1)             # replace checks again


def test_a_refusal_that_names_two_settings_names_both_by_their_flags():
    with pytest.raises(SettingError) as e:
        EngineOptions(quantize="int8", dtype="bfloat16")
    assert str(e.value) == "quantize int8 quantizes float32 weights; drop dtype bfloat16 (or quantize)"
    assert e.value.named(lambda name: flag(leaves(EngineOptions())[name][0])) == ("--quantize int8 quantizes float32 weights; drop --dtype "
                                                        "bfloat16 (or --quantize)")


def test_server_and_limits_settings():
    for bad, message in (({"port": 70000}, "port must be from 0 to 65535, got 70000"),
                         ({"max_batch": 0}, "max_batch must be >= 1, got 0"),
                         ({"timeout_s": math.inf}, "timeout_s must be a finite number > 0, got inf"),
                         ({"log_level": "loud"}, "log_level must be one of debug, info, warning, error, got 'loud'")):
        with pytest.raises(SettingError) as e:
            ServerConfig(**bad)
        assert str(e.value) == message
    with pytest.raises(SettingError, match="^max_options must be from 2 to 100000, got 100001$"):
        Limits(max_options=100_001)
    with pytest.raises(SettingError, match="^max_request_tokens must be a positive integer, got 0$"):
        Limits(max_request_tokens=0)
    assert ServerConfig().engine.state_cache_mb == 256.0 and DEFAULT_OPTIONS.state_cache_mb == 0


def test_build_fills_nested_settings_and_reads_variables_only_when_no_flag_is_given():
    values = {"port": 0, "dtype": "float32", "max_options": 1000, "max_connections": None, "body_timeout_s": "7",
              "unrelated": 1}
    env = {"KEVLIKE_MAX_CONNECTIONS": " 64 ", "KEVLIKE_BODY_TIMEOUT_S": "lots", "KEVLIKE_HEADER_TIMEOUT_S": ""}
    c = build(ServerConfig(), values, env)
    assert (c.port, c.engine.dtype, c.engine.limits.max_options) == (0, "float32", 1000)
    assert (c.max_connections, c.body_timeout_s, c.header_timeout_s) == (64, 7.0, 10.0)   # flag over variable
    assert c.engine.state_cache_mb == 256.0                                             # the server's default kept
    with pytest.raises(ValueError, match="^KEVLIKE_MAX_CONNECTIONS must be an integer >= 1, got '0'$"):
        build(ServerConfig(), {"max_connections": None}, {"KEVLIKE_MAX_CONNECTIONS": "0"})
    with pytest.raises(SettingError, match="^max_connections must be an integer >= 1, got '2.5'$"):
        build(ServerConfig(), {"max_connections": "2.5"}, {})


def test_threads_from_the_environment():
    assert threads_from_env({}) == "auto" and threads_from_env({"KEVLIKE_THREADS": " 3 "}) == 3
    with pytest.raises(ValueError, match="^KEVLIKE_THREADS must be 'auto' or an integer from 1 to 256, got 'x'$"):
        threads_from_env({"KEVLIKE_THREADS": "x"})


def test_the_config_package_imports_nothing_heavy():
    code = ("import sys, kevlike.config.server, kevlike.cli; "
            "print(sorted(m for m in ('torch', 'numpy', 'pydantic', 'transformers') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_engine_keywords_are_options_checked_before_any_model_is_looked_up(tmp_path):
    from kevlike.model.engine import Engine

    with pytest.raises(SettingError, match="^option_orders must be at most 24"):
        Engine.from_pretrained(str(tmp_path / "no-such-model"), EngineOptions(), option_orders=1000)
    with pytest.raises(TypeError):
        Engine.from_pretrained(str(tmp_path / "no-such-model"), no_such_setting=1)
