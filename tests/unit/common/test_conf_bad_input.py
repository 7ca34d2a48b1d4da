"""Config files as bad input (the fuzz target ``config`` of harness.fuzz_targets): whatever the bytes, loading ends
in one ConfigError (the one-line error and exit 2), never another exception. Regressions the fuzzer found."""

from __future__ import annotations

import pytest

from broker.config import load_broker_settings
from common.errors import ConfigError
from namesrv.config import load_namesrv_config


@pytest.mark.parametrize("value", ["1" * 5000, "-" + "9" * 4301, "+" + "0" * 10_000])
def test_an_integer_longer_than_int_converts_is_a_config_error(tmp_path, value):
    # int() refuses more than 4,300 digits (sys.get_int_max_str_digits): that ValueError escaped as a traceback
    path = tmp_path / "broker.conf"
    path.write_text(f"listenPort={value}\n")
    with pytest.raises(ConfigError, match="listenPort"):
        load_broker_settings(path, environ={})
    path.write_text(f"listenPort={value}\n")
    with pytest.raises(ConfigError, match="listenPort"):
        load_namesrv_config(path)
