"""promotion.yaml is a file people edit: its versions must never become paths or queries.

Finding 12 of issue 16: a `candidate` of `../../…` made the controller write
outside its work dir (the canary report's folder) and reached PromQL
unescaped. Real bare git repo, a human's commit, the real controller.
"""

from __future__ import annotations

import pathlib

import pytest
import yaml

from promotion.controller import Controller, ControllerConfig
from promotion.decision.state import load_state
from promotion.errors import StateError
from tests.fixtures.gitops import Human
from tests.fixtures.promotion_controller import (
    MODEL,
    Clock,
    RouterStub,
    git,
    merge_to_main,
    merged_at,
)


@pytest.mark.parametrize("field, value", [
    ("candidate", "../../escape"), ("stable", "v1/../../x"), ("candidate", 'v2"} or vector(1)'),
    ("candidate", "V2"), ("model", "../apps"),
])
def test_a_version_that_is_a_path_or_a_query_is_refused(field, value):
    doc = {"model": MODEL, "phase": "progressing", "stable": "v1", "candidate": "v2",
           "weight": 10, field: value}
    with pytest.raises(StateError, match=f"apps/{MODEL}/promotion.yaml: {field}"):
        load_state(doc, f"apps/{MODEL}/promotion.yaml")


def test_the_controller_writes_nothing_outside_its_work_dir(tmp_path, promotion_repo):
    merge_to_main(promotion_repo, "v2")
    human = Human(promotion_repo, tmp_path / "human")
    human.sync()
    state = yaml.safe_load(human.read(f"apps/{MODEL}/promotion.yaml"))
    state["candidate"] = "../../../escaped"
    human.write(f"apps/{MODEL}/promotion.yaml", yaml.safe_dump(state))
    tip = human.commit_push("hand edit")
    work = tmp_path / "deep" / "er" / "work"
    source = RouterStub(promotion_repo)
    controller = Controller(ControllerConfig(repo=str(promotion_repo), workdir=work), source,
                            clock=Clock(merged_at(promotion_repo) + 3600))
    try:
        assert controller.tick() == []
    finally:
        controller.close()
    assert git(promotion_repo, "rev-parse", "main").strip() == tip  # nothing committed
    assert source.calls == []  # no query was built from it
    assert not any(p.name == "escaped" for p in tmp_path.rglob("escaped"))
    assert not list(pathlib.Path(tmp_path).glob("**/rollouts/**/escaped*"))
