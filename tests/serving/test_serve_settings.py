"""`mlops serve`'s options have one owner, `serving.settings.ServeSettings`: its defaults,
its bounds (the same for a flag and for the model's `serving:` section) and the precedence
flag > infer_cfg.yml > default. Pure: no model is loaded, no server started."""

import math

import pytest

from mlops.cli import main
from serving import limits, preprocess
from serving.dataplane import ServerSettings
from serving.options import ServingOptions
from serving.settings import DEFAULTS, ServeSettings, SettingsError

# (flags, words of the one-line refusal): each names the flag and its bound.
REFUSED = [
    (["--workers", "0"], "--workers 0: must be at least 1"),
    (["--workers", "65"], "--workers 65: must be at most 64"),
    (["--batch-max-size", "0"], "--batch-max-size 0: must be at least 1"),
    (["--batch-max-size", "257"], "--batch-max-size 257: must be at most 256"),
    (["--batch-timeout-ms", "1001"], "--batch-timeout-ms 1001: must be at most 1000"),
    (["--inline-max-ms", "-1"], "--inline-max-ms -1: must be at least 0"),
    (["--max-request-pixels", "0"], "--max-request-pixels 0: must be at least 1"),
    (["--decode-timeout", "0"], "--decode-timeout 0: must be more than 0"),
    (["--decode-timeout", "nan"], "--decode-timeout nan: must be a number between 0 and 3600"),
    (["--body-timeout", "0"], "--body-timeout 0: must be more than 0"),
    (["--max-body-bytes", "0"], "--max-body-bytes 0: must be at least 1"),
    (["--max-in-flight", "0"], "--max-in-flight 0: must be at least 1"),
    (["--math-threads", "0"], "--math-threads 0: must be at least 1"),
    (["--threads", "0"], "--threads 0: must be at least 1"),
    (["--port", "70000"], "--port 70000: must be at most 65535"),
    (["--max-headers", "0"], "--max-headers 0: must be at least 8"),
    (["--header-timeout", "nan"], "--header-timeout nan: must be a number between 0.1 and 300"),
    (["--max-buffered-bytes", "4096"], "--max-buffered-bytes (4096) must be at least "
                                       "--max-body-bytes"),
]


@pytest.mark.parametrize("flags,words", REFUSED, ids=[" ".join(f) for f, _ in REFUSED])
def test_a_bad_flag_is_refused_before_the_model_is_read(tmp_path, capsys, flags, words):
    """Exit 2 and one line naming the flag, for a model directory that does not even
    exist: the flags are checked before anything is loaded."""
    argv = ["serve", str(tmp_path / "absent"), "--port", "1", *flags]
    if flags[0] == "--port":
        argv = ["serve", str(tmp_path / "absent"), *flags]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert words in err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1


def test_a_flag_takes_the_bounds_of_the_model_section():
    """What `infer_cfg.yml` may not declare, the flag may not set either."""
    for field, value in (("workers", 65), ("batch_max_size", 257), ("batch_timeout_ms", 1001.0),
                         ("max_request_pixels", (1 << 30) + 1)):
        with pytest.raises(Exception):
            ServingOptions.model_validate({field: value})
        with pytest.raises(SettingsError, match=f"--{field.replace('_', '-')} "):
            ServeSettings.from_options({"port": 1, field: value})


def test_flag_over_model_section_over_default():
    declared = ServingOptions(workers=3, batch_max_size=8, reduced_decode=True)
    merged = ServeSettings.from_options({"port": 1, "workers": 2, "batch_max_size": None},
                                        declared)
    assert (merged.workers, merged.batch_max_size, merged.reduced_decode) == (2, 8, True)
    assert merged.batch_timeout_ms == DEFAULTS.batch_timeout_ms == 0.0
    assert ServeSettings.from_options({"port": 1}).workers == 1


def test_a_bad_model_section_value_is_refused_through_the_merge():
    """A section built without validation (model_construct) is still bounded here."""
    declared = ServingOptions.model_construct(workers=0)
    with pytest.raises(SettingsError, match="--workers 0: must be at least 1"):
        ServeSettings.from_options({"port": 1}, declared)


def test_the_server_and_the_limits_take_the_settings_defaults():
    """`ServerSettings` (what a server process runs with) and `HttpLimits` have no
    defaults of their own; the decoder's stay equal to the settings'."""
    built = ServerSettings(model_name="m", model_version="v")
    for field in ("host", "max_body_bytes", "max_in_flight", "body_timeout", "math_threads",
                  "graceful_timeout", "workers", "batch_max_size", "batch_timeout_ms",
                  "inline_max_ms"):
        assert getattr(built, field) == getattr(DEFAULTS, field), field
    assert DEFAULTS.http_limits() == limits.HttpLimits()
    assert DEFAULTS.max_request_pixels == preprocess.MAX_REQUEST_PIXELS
    assert DEFAULTS.decode_timeout == preprocess.DECODE_TIMEOUT


def test_threads_default_to_the_cores_shared_among_workers():
    settings = ServeSettings.from_options({"port": 1, "workers": 3})
    assert settings.threads_per_worker(8) == 2
    assert settings.threads_per_worker(2) == 1
    assert ServeSettings.from_options({"port": 1, "threads": 5}).threads_per_worker(8) == 5
    assert not math.isnan(settings.inline_max_ms)
