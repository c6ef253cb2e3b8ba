"""promotion.yaml: its shape, round trip, errors that name the field, human actions."""

from __future__ import annotations

import datetime as dt
import inspect
import math

import pytest
import yaml
from pydantic import ValidationError

from promotion.decision.state import (
    CanaryState,
    Counts,
    Phase,
    dump_state,
    dump_state_yaml,
    load_state,
    pause,
    request_abort,
    resume,
    start_canary,
)
from promotion.errors import StateError

T0 = dt.datetime(2026, 11, 23, 9, 0, tzinfo=dt.timezone.utc)


def test_round_trip_through_yaml_text_and_dict() -> None:
    state = start_canary("shapes-detector", "v1", "v2", 10, T0).with_(
        canary_counts=Counts(requests=5, errors=1, latency={0.1: 4.0, math.inf: 5.0}))
    text = dump_state_yaml(state)
    assert load_state(text) == state
    assert load_state(dump_state(state)) == state
    plain = yaml.safe_load(text)
    assert plain["phase"] == "progressing"
    assert plain["canary_counts"]["latency"] == {"0.1": 4, "+Inf": 5}
    assert plain["started_at"] == "2026-11-23T09:00:00Z"


def test_every_phase_documents_its_meaning() -> None:
    source = inspect.getsource(Phase)
    for phase in Phase:
        assert f'{phase.name} = "{phase.value}"\n    """' in source


@pytest.mark.parametrize("text,field", [
    ("model: m\nphase: flying\n", "phase"),
    ("model: m\nweight: 120\n", "weight"),
    ("phase: idle\n", "model"),
    ("model: m\nstatistics: {relative: [1, 2]}\n", "statistics.relative"),
    ("model: m\nsurprise: 1\n", "surprise"),
])
def test_bad_state_names_the_field(text: str, field: str) -> None:
    with pytest.raises(StateError, match=rf"apps/m/promotion.yaml: {field}"):
        load_state(text, origin="apps/m/promotion.yaml")


def test_not_a_mapping_or_not_yaml() -> None:
    with pytest.raises(StateError, match="expected a mapping"):
        load_state("- a\n- b\n")
    with pytest.raises(StateError, match="not valid YAML"):
        load_state("model: [unclosed\n")


def test_state_written_before_latency_statistics_still_loads() -> None:
    old = {"version": 1, "model": "m", "phase": "progressing", "weight": 10,
           "statistics": {"relative": [0.0] * 7, "limit": [0.0] * 7}}
    state = load_state(old)
    assert state.statistics.latency_relative == (0.0,) * 7


def test_human_actions() -> None:
    state = start_canary("m", "v1", "v2", 25, T0)
    paused = pause(state, by="bob")
    assert paused.phase is Phase.PAUSED and paused.pause_reason == "paused by bob"
    resumed = resume(paused.with_(empty_intervals=7), T0)
    assert resumed.phase is Phase.PROGRESSING and resumed.empty_intervals == 0
    assert request_abort(state).requested == "abort"
    with pytest.raises(StateError, match="nothing to abort"):
        request_abort(CanaryState(model="m"))
    with pytest.raises(StateError, match="not paused"):
        resume(state, T0)


def test_state_is_frozen() -> None:
    state = start_canary("m", "v1", "v2", 10, T0)
    with pytest.raises(ValidationError, match="frozen"):
        state.weight = 50  # type: ignore[misc]
