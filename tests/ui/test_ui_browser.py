"""`mlops ui` in a real headless Chromium (Debian's `chromium` + `chromedriver`).

The app runs on loopback over a real GitOps repo (`tests/fixtures/ui.py`); the
browser clicks the buttons a person clicks. Chromium is started with a proxy
that goes nowhere (anything not on loopback would fail) and its request log
is checked: every URL the page loaded is on 127.0.0.1. Screenshots go to the
test's tmp dir; with `MLOPS_UI_SCREENSHOTS=DIR` one per page is also copied
there (how docs/ui/*.png are made).
"""

from __future__ import annotations

import pathlib
import subprocess

import pytest
import yaml

from gitops.repo import Mirror
from mlops.ui.app import UiConfig
from tests.fixtures.ui import (
    Served,
    UiRepo,
    all_loopback,
    click,
    make_ui_repo,
    requested,
    shot,
    text,
    wait,
    weight,
)
from workflows import run_events

pytestmark = pytest.mark.slow


@pytest.fixture
def repo(tmp_path: pathlib.Path) -> UiRepo:
    return make_ui_repo(tmp_path)


def test_approve_by_click_starts_a_canary_whose_weights_move_on_the_page(chromium, repo,
                                                                          tmp_path):
    with Served(UiConfig(gitops=str(repo.gitops), user="ada")) as app:
        chromium.get(app.url + "#/proposals")
        wait(chromium, lambda d: "open" in text(d, f'[data-pr-state="{repo.pr}"]'), "open PR")
        click(chromium, f"#pr-{repo.pr} summary")
        shot(chromium, tmp_path, "proposals")
        click(chromium, f'button[data-approve="{repo.pr}"]')
        wait(chromium, lambda d: "merged PR #2" in text(d, "#message.ok"), "approve message")
        assert repo.state().candidate == "v2"  # the merge put the canary on main
        chromium.get(app.url + "#/models")
        wait(chromium, lambda d: text(d, '[data-phase="det"]') == "waiting", "waiting phase")
        wait(chromium, lambda d: text(d, weight("v2")) == "0%", "v2 at 0%")
        repo.step_to(10)  # the controller's decision commit: the page follows by itself
        wait(chromium, lambda d: text(d, weight("v2")) == "10%", "v2 at 10%")
        wait(chromium, lambda d: text(d, weight("v1")) == "90%", "v1 at 90%")
        repo.step_to(25)
        wait(chromium, lambda d: text(d, weight("v2")) == "25%", "v2 at 25%")
        wait(chromium, lambda d: text(d, weight("v1")) == "75%", "v1 at 75%")
        click(chromium, "#model-det summary")
        shot(chromium, tmp_path, "models")
        all_loopback(requested(chromium))


def test_pause_by_click_is_a_commit_and_a_bad_step_is_a_message(chromium, repo, tmp_path):
    with Served(UiConfig(gitops=str(repo.gitops), user="ada")) as app:
        chromium.get(app.url + "#/proposals")
        click(chromium, f'button[data-approve="{repo.pr}"]')
        wait(chromium, lambda d: "merged" in text(d, "#message.ok"), "merged")
        repo.step_to(10)
        chromium.get(app.url + "#/models")
        # the page fills "as" from /api/info once loaded; typing before that would be undone
        wait(chromium, lambda d: text(d, "#source") != "", "the page to load")
        chromium.find_element("id", "who").clear()
        chromium.find_element("id", "who").send_keys("Grace")
        click(chromium, 'button[data-action="pause"][data-model="det"]')
        wait(chromium, lambda d: "det: paused at 10%" in text(d, "#message.ok"), "paused")
        with Mirror(repo.gitops) as mirror:
            head = mirror.log(mirror.sha("main") or "")[0]
        assert head.trailers["Mlops-Decision"] == "pause/human"
        assert head.trailers["Mlops-Requested-By"] == "Grace"
        wait(chromium, lambda d: text(d, '[data-phase="det"]') == "paused", "paused phase")
        # approving a step of a paused canary: the CLI's refusal, in the page
        click(chromium, 'button[data-action="approve"][data-model="det"]')
        wait(chromium, lambda d: "nothing to approve (phase paused)" in text(d, "#message.error"),
              "refusal shown")
        assert "Traceback" not in chromium.page_source
        wait(chromium, lambda d: d.find_element(
            "css selector", 'button[data-action="resume"]').is_enabled(), "buttons back")
        shot(chromium, tmp_path, "refused")
        all_loopback(requested(chromium))


def test_approving_changed_weights_is_refused_in_the_page(chromium, repo, tmp_path):
    work = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", "mlops/propose/det/v2", str(repo.gitops),
                    str(work)], check=True)
    path = work / "apps/det/deployment-v2.yaml"
    doc = yaml.safe_load(path.read_text())
    doc["metadata"]["annotations"]["mlops.paddle.org/weights-sha256"] = "0" * 64
    path.write_text(yaml.safe_dump(doc))
    git = ["git", "-c", "user.name=Eve", "-c", "user.email=eve@example.com"]
    subprocess.run([*git, "commit", "-qam", "swap the weights"], cwd=work, check=True)
    subprocess.run(["git", "push", "-q", "origin", "HEAD"], cwd=work, check=True)
    runs = tmp_path / "runs" / "run-1"
    runs.mkdir(parents=True)
    (runs / "train.log").write_text("config: total_steps=30\nstep=10 epoch=0 loss=0.9000\n"
                                    "step=30 epoch=2 loss=0.4120\n")
    run_events.append(runs, "run_started", workflow="train-det")
    for task, seconds in (("prepare", 2.0), ("train", 41.0), ("evaluate", 6.5)):
        run_events.append(runs, "task_started", task=task, log=str(runs / "train.log"))
        run_events.append(runs, "task_finished", task=task, phase="Succeeded", seconds=seconds,
                          outputs={"map50": "0.61"} if task == "evaluate" else {})
    run_events.append(runs, "run_finished", phase="Succeeded", seconds=50.0)
    with Served(UiConfig(gitops=str(repo.gitops), runs=[runs], user="ada")) as app:
        chromium.get(app.url + "#/proposals")
        click(chromium, f'button[data-approve="{repo.pr}"]')
        wait(chromium, lambda d: "refusing to merge" in text(d, "#message.error"), "refusal")
        assert "carries weights sha256" in text(chromium, "#message.error")
        assert repo.state().candidate is None  # nothing merged
        chromium.get(app.url + "#/runs")
        wait(chromium, lambda d: "train" in text(d, ".dag"), "run steps")
        click(chromium, '.dag .step[data-task="train"]')
        wait(chromium, lambda d: "loss=0.4120" in text(d, "pre.log"), "step log")
        wait(chromium, lambda d: "step 30/30" in text(d, '[data-training="train"]') and
             "loss 0.4120" in text(d, '[data-training="train"]'), "training progress")
        shot(chromium, tmp_path, "runs")
        all_loopback(requested(chromium))


def test_an_unreadable_repo_is_a_message_on_the_page(chromium, tmp_path):
    with Served(UiConfig(gitops=str(tmp_path / "missing.git"), user="ada")) as app:
        chromium.get(app.url + "#/models")
        wait(chromium, lambda d: "cannot read:" in text(d, "#page-error"), "the reason")
        assert "missing.git" in text(chromium, "#page-error")
        assert "Traceback" not in chromium.page_source


def test_charts_follow_the_canary_and_two_runs_are_compared(chromium, repo, tmp_path):
    """The Models page's charts follow each decision commit without a reload (pushed over
    server-sent events): the weight in git steps 0 -> 10 -> 25 %, each commit a mark on
    the time axis. Then two runs ticked on the Runs page open side by side, the rows that
    differ highlighted and both loss curves drawn. No Prometheus here (the live platform's
    charts: tests/local/test_platform_e2e.py), so the page says so beside the charts."""
    import requests

    from tests.fixtures.ui import make_run

    runs = tmp_path / "runs"
    make_run(runs, "aaaa", lr=0.004, map50=0.61, passed=True, losses=[3.0, 1.5, 0.9, 0.7])
    make_run(runs, "bbbb", lr=0.002, map50=0.48, passed=False, losses=[3.1, 2.0, 1.4, 1.2],
             seconds=140.0)
    with Served(UiConfig(gitops=str(repo.gitops), runs=[runs], user="ada")) as app:
        requests.post(f"{app.url}api/proposals/{repo.pr}/approve", json={"by": "ada"},
                      headers={"X-Mlops-UI": "1"}, timeout=60).raise_for_status()
        chromium.get(app.url + "#/models")
        weights = '[data-last="det:weight"]'
        wait(chromium, lambda d: "v1 git 100" in text(d, weights), "the weight chart")
        assert chromium.find_elements("css selector", '[data-chart="det:weight"] canvas')
        assert "limit 0.01" in text(chromium, '[data-last="det:error_share"]')
        assert "no Prometheus given" in text(chromium, ".chart-note")
        marks = int(chromium.find_element("css selector", ".chart-grid")
                    .get_attribute("data-marks"))
        repo.step_to(10)
        wait(chromium, lambda d: "v2 git 10" in text(d, weights) and
             "v1 git 90" in text(d, weights), "the chart at 10%", 20)
        repo.step_to(25)
        wait(chromium, lambda d: "v2 git 25" in text(d, weights), "the chart at 25%", 20)
        assert int(chromium.find_element("css selector", ".chart-grid")
                   .get_attribute("data-marks")) == marks + 2
        assert "(pushed)" in text(chromium, "#updated")
        chromium.execute_script("document.querySelector('.chart-grid').scrollIntoView()")
        shot(chromium, tmp_path, "models-charts")
        chromium.get(app.url + "#/runs")
        for out in ("aaaa", "bbbb"):
            click(chromium, f'input[data-compare="{runs / out / "out"}"]')
        click(chromium, "#compare-runs")
        wait(chromium, lambda d: "2 runs compared" in text(d, "#compare h2"), "the comparison")
        lr = '#compare tr.differs[data-row="parameters.hyperparameters.lr"]'
        assert text(chromium, lr).split() == ["hyperparameters.lr", "0.004000", "0.002000"]
        assert not chromium.find_elements(
            "css selector", '#compare tr.differs[data-row="parameters.hyperparameters.epochs"]')
        assert chromium.find_elements("css selector", "#loss-chart canvas")
        shot(chromium, tmp_path, "compare")
        all_loopback(requested(chromium))
