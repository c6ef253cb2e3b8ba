"""A fleet in one pass (issue 31): models analysed at once, their decisions pushed together.

Real parts: a guarded bare GitOps repo, the write-back and `gitops.batch`,
`decide()`. Scripted part, as in tests/promotion/test_promotion_controller.py: the
metric source answers from the weights committed on main (a router that
applies them at once) with a scripted error rate per model; the Prometheus
source is tested against a real Prometheus elsewhere. Time is a hand-moved
clock.
"""

from __future__ import annotations

import datetime as dt
import pathlib

import yaml

from gitops import layout
from gitops.writeback import Message, WriteBack
from promotion.controller import Controller, ControllerConfig
from promotion.decision.observations import Observations, VersionWindow
from promotion.decision.policy import load_policy
from promotion.gitrepo.propose import plan_proposal
from tests.fixtures.gitops import git
from tests.fixtures.promotion_controller import TEST_POLICY, Clock, record

MODELS = ("a", "b", "c")


def _merge(repo: pathlib.Path, version: str, models: tuple[str, ...] = MODELS) -> None:
    def change(root: pathlib.Path) -> None:
        for model in models:
            folder = root / layout.APPS / model
            current = layout.read_model(root, model) if folder.is_dir() else None
            plan_proposal(record(version), current, load_policy(TEST_POLICY), model=model,
                          image="img:1", model_uri=f"file:///models/{model}/{version}").write(root)
    WriteBack(repo).commit("main", change, Message(f"merge {version} of every model"))


class Fleet:
    """Observations from main's committed weight per model; model `b`'s canary fails."""

    def __init__(self, repo: pathlib.Path) -> None:
        self.repo = repo

    def observe(self, model: str, stable: str, canary: str, window: float,
                at: dt.datetime | None = None) -> Observations:
        state = yaml.safe_load(git(self.repo, "show", f"main:apps/{model}/promotion.yaml"))
        total = int(100 * window)
        n_c = total * int(state.get("weight") or 0) // 100
        bad = n_c // 5 if model == "b" else 0
        return Observations(canary=VersionWindow(requests=n_c, errors=bad),
                            stable=VersionWindow(requests=total - n_c, errors=0),
                            window_seconds=window)

    def is_online(self) -> bool:
        return True


def _chains(repo: pathlib.Path) -> dict[str, list[str]]:
    sep, end = "\x1f", "\x1e"
    out: dict[str, list[str]] = {}
    for rec in git(repo, "log", "--reverse", f"--format=%(trailers:only,unfold){end}",
                   "main").split(end):
        t = dict(line.partition(": ")[::2] for line in rec.strip().splitlines())
        if "Mlops-Window" in t and t.get("Mlops-Decision") != "step/ready":
            out.setdefault(t["Mlops-Model"], []).append(t["Mlops-Step"])
    del sep
    return out


def test_a_pass_over_a_fleet_decides_each_model_once_and_pushes_together(guarded_repo, tmp_path,
                                                                          monkeypatch):
    git(guarded_repo, "config", "core.logAllRefUpdates", "always")
    _merge(guarded_repo, "v1")
    _merge(guarded_repo, "v2")
    clock = Clock(float(git(guarded_repo, "log", "-1", "--format=%ct", "main")))
    controller = Controller(ControllerConfig(repo=str(guarded_repo), workdir=tmp_path / "w",
                                             workers=3), Fleet(guarded_repo), clock=clock)
    pushes = len(git(guarded_repo, "reflog", "show", "--format=%H", "refs/heads/main").split())
    parsed: list[str] = []
    read_model = layout.read_model
    tree = tmp_path / "w" / "main"  # what the controller reads (not the writer's clone)
    monkeypatch.setattr(layout, "read_model", lambda root, model: (
        parsed.append(model) if pathlib.Path(root) == tree else None) or read_model(root, model))
    passes = []
    for _ in range(9):  # the last decision (promote) comes in the ninth pass
        passes.append(controller.tick())
        clock.advance(1.0)
    controller.close()

    # The first pass gives every ready candidate its first step, in one push.
    assert sorted(o.model for o in passes[0] if o.committed) == list(MODELS)
    assert _chains(guarded_repo) == {"a": ["10->25", "25->50", "50->100", "100->100"],
                                     "b": ["10->0"],
                                     "c": ["10->25", "25->50", "50->100", "100->100"]}
    commits = [o for p in passes for o in p if o.committed]
    print(parsed)
    assert len(commits) == 3 + 4 + 1 + 4  # one commit per decision: none lost, none twice
    after = len(git(guarded_repo, "reflog", "show", "--format=%H", "refs/heads/main").split())
    assert after - pushes == 6  # a pass's decisions share a push: 12 commits, 6 pushes
    # A folder is parsed again only when it changed: b, done after the first window,
    # is read for its two commits, not for every move of main.
    assert parsed.count("b") == 3 and parsed.count("a") == 5


def test_a_fleet_of_one_still_pushes_its_decisions(guarded_repo, tmp_path):
    """With `workers` set and a single model the pass runs inline, and its decision
    (held for the pass's one push) is still pushed."""
    _merge(guarded_repo, "v1", ("a",))
    _merge(guarded_repo, "v2", ("a",))
    clock = Clock(float(git(guarded_repo, "log", "-1", "--format=%ct", "main")))
    controller = Controller(ControllerConfig(repo=str(guarded_repo), workdir=tmp_path / "w",
                                             workers=4), Fleet(guarded_repo), clock=clock)
    outcomes = controller.tick()
    controller.close()
    assert [(o.model, o.cause) for o in outcomes] == [("a", "ready")]
    assert outcomes[0].committed == git(guarded_repo, "rev-parse", "main")


class BatchFleet(Fleet):
    """`Fleet` that can also answer many windows at once, and counts how it was asked."""

    def __init__(self, repo: pathlib.Path) -> None:
        super().__init__(repo)
        self.alone: list[str] = []
        self.batches: list[list[str]] = []

    def observe(self, model: str, stable: str, canary: str, window: float,
                at: dt.datetime | None = None) -> Observations:
        self.alone.append(model)
        return super().observe(model, stable, canary, window, at)

    def observe_many(self, wanted: list[tuple[str, str, str, float, dt.datetime]]
                     ) -> list[Observations | None]:
        self.batches.append([w[0] for w in wanted])
        return [Fleet.observe(self, *w[:4], at=w[4]) for w in wanted]


def test_windows_due_in_one_pass_are_read_at_once_with_the_same_decisions(guarded_repo,
                                                                           tmp_path):
    """Issue 31: the pass reads every model's due window in one `observe_many` (one
    query per signal in `PrometheusSource`) and decides exactly as one by one."""
    _merge(guarded_repo, "v1", ("a", "c"))
    _merge(guarded_repo, "v2", ("a", "c"))
    clock = Clock(float(git(guarded_repo, "log", "-1", "--format=%ct", "main")))
    fleet = BatchFleet(guarded_repo)
    controller = Controller(ControllerConfig(repo=str(guarded_repo), workdir=tmp_path / "w",
                                             workers=3), fleet, clock=clock)
    for _ in range(15):  # half a window per pass: a track is known before its window is due
        controller.tick()
        clock.advance(0.5)
    controller.close()
    assert _chains(guarded_repo) == {"a": ["10->25", "25->50", "50->100"],
                                     "c": ["10->25", "25->50", "50->100"]}
    assert fleet.batches[0] == ["a", "c"] and all(b == ["a", "c"] for b in fleet.batches)
    assert fleet.alone == []  # no window was read twice or one by one
