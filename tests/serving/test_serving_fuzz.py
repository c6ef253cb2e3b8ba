"""No client input yields a 5xx: valid requests for every inference route, mutated at
random (`tests/fuzz_requests.py`, Hypothesis), against real servers. Among the
mutations, what issue 41 found: MPO and junk-byte JPEGs, outputs asked for twice, raw
inputs whose batch sizes disagree, and header floods (too many fields, one too large).

Two models, one per preprocessing path: the tiny detector in the example's format
built without its deliberate shape trap (`sturdy_model_dir`: a 500 there would be the
model's, not the client's) and a PaddleDetection-format export (three inputs, NMS in
the graph). Neither declares a fault drill: a drill's 5xx is the point of a drill.
Every answer must be 200 or 4xx, the server must stay ready, and its metrics must
count no 5xx. A short budget here (a few seconds); `python benchmarks/fuzz.py
--minutes 10` runs the same strategy for longer (`benchmarks/results/fuzz.json`).
"""

from __future__ import annotations

import re

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fixtures.serving import served
from tests.fuzz_requests import Target, fuzz_request, send

EXAMPLES = 150  # per model: ~3 s each with the servers warm


def _target(server, inputs, image_input) -> Target:
    return Target(server.url, server.model_name, server.model_version, inputs, image_input)


@pytest.fixture(scope="module")
def targets(sturdy_model_dir, ppdet_model_dir, tmp_path_factory):
    logs = tmp_path_factory.mktemp("fuzz-servers")
    with served(sturdy_model_dir, "--threads", "1", log_dir=logs) as example, \
            served(ppdet_model_dir, "--threads", "1", log_dir=logs) as ppdet:
        yield {
            "example": _target(example, (("image", 3),), "image_bytes"),
            "ppdet": _target(ppdet, (("image", 3), ("im_shape", -1), ("scale_factor", -1)),
                             "image"),
        }


def _server_errors(url: str) -> float:
    text = requests.get(f"{url}/metrics", timeout=5).text
    return sum(float(m) for m in re.findall(
        r'model_requests_total{[^}]*status_code="5\d\d"[^}]*} ([0-9.e+]+)', text))


@pytest.mark.parametrize("model", ["example", "ppdet"])
def test_no_client_input_yields_a_server_error(targets, model):
    target = targets[model]

    @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(data=st.data())
    def check(data):
        request = data.draw(fuzz_request(target))
        answer = send(target, request)
        assert answer.status_code < 500, (answer.status_code, answer.text[:300],
                                          request.describe())
        if answer.status_code >= 400:  # an error body that says what is wrong
            assert answer.json()["error"], answer.text

    check()
    assert requests.get(f"{target.url}/v2/health/ready", timeout=5).status_code == 200
    assert _server_errors(target.url) == 0
