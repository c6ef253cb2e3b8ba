"""`mlops ui` in a real headless Chromium (Debian's `chromium` + `chromedriver`).

The app runs on loopback over a real GitOps repo (`tests/fixtures/ui.py`); the
browser clicks the buttons a person clicks. Chromium is started with a proxy
that goes nowhere (anything not on loopback would fail) and its request log
is checked: every URL the page loaded is on 127.0.0.1. Screenshots go to the
test's tmp dir; with `MLOPS_UI_SCREENSHOTS=DIR` one per page is also copied
there (how docs/ui/*.png are made).
"""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import threading
import time
import urllib.parse
from typing import Any, Iterator

import pytest

from mlops.ui.app import UiConfig, create_app
from tests.fixtures.common import free_port
from tests.fixtures.ui import UiRepo, make_ui_repo
from workflows import run_events

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
DRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"

pytestmark = pytest.mark.slow


class Served:
    """The UI app under uvicorn on a free loopback port, in a thread."""

    def __init__(self, config: UiConfig) -> None:
        import uvicorn

        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(create_app(config), host="127.0.0.1",
                                                    port=self.port, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def __enter__(self) -> Served:
        self.thread.start()
        deadline = time.monotonic() + 15
        while not self.server.started:
            assert time.monotonic() < deadline, "uvicorn did not start"
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.should_exit = True
        self.thread.join(10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    assert os.path.exists(CHROMIUM) and os.path.exists(DRIVER), \
        "needs Debian's chromium and chromium-driver: run scripts/setup.sh"
    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager must not download anything
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,800",
                # nothing may leave loopback: a proxy that answers nothing for every other host
                "--proxy-server=http://127.0.0.1:9", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-default-apps"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(DRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _requested(driver: Any) -> list[str]:
    urls = []
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        if message["method"] == "Network.requestWillBeSent":
            urls.append(message["params"]["request"]["url"])
    return urls


def _all_loopback(urls: list[str]) -> None:
    assert urls, "the request log is empty"
    for url in urls:
        parsed = urllib.parse.urlparse(url)
        assert parsed.scheme in ("http", "data") and (
            parsed.scheme == "data" or parsed.hostname == "127.0.0.1"), url


def _wait(driver: Any, predicate: Any, what: str, timeout: float = 15.0) -> Any:
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(
        lambda d: predicate(d), message=what)


def _text(driver: Any, css: str) -> str:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException

    try:
        return driver.find_element("css selector", css).text
    except (NoSuchElementException, StaleElementReferenceException):
        return ""


def _click(driver: Any, css: str) -> None:
    from selenium.common.exceptions import StaleElementReferenceException

    def clicked(d: Any) -> bool:
        try:
            button = d.find_element("css selector", css)
            if not button.is_enabled():
                return False
            button.click()
            return True
        except StaleElementReferenceException:  # the page re-rendered under the click
            return False
    _wait(driver, clicked, f"click {css}")


def _shot(driver: Any, tmp_path: pathlib.Path, name: str) -> pathlib.Path:
    path = tmp_path / f"{name}.png"
    driver.save_screenshot(str(path))
    assert path.stat().st_size > 1000
    out = os.environ.get("MLOPS_UI_SCREENSHOTS")
    if out:
        pathlib.Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, pathlib.Path(out) / path.name)
    return path


def _weight(version: str) -> str:
    return f'td.weight[data-model="det"][data-version="{version}"]'


@pytest.fixture
def repo(tmp_path: pathlib.Path) -> UiRepo:
    return make_ui_repo(tmp_path)


def test_approve_by_click_starts_a_canary_whose_weights_move_on_the_page(browser, repo,
                                                                          tmp_path):
    with Served(UiConfig(gitops=str(repo.gitops), user="ada")) as app:
        browser.get(app.url + "#/proposals")
        _wait(browser, lambda d: "open" in _text(d, f'[data-pr-state="{repo.pr}"]'), "open PR")
        browser.find_element("css selector", f"#pr-{repo.pr} summary").click()
        _shot(browser, tmp_path, "proposals")
        _click(browser, f'button[data-approve="{repo.pr}"]')
        _wait(browser, lambda d: "merged PR #2" in _text(d, "#message.ok"), "approve message")
        assert repo.state().candidate == "v2"  # the merge put the canary on main
        browser.get(app.url + "#/models")
        _wait(browser, lambda d: _text(d, '[data-phase="det"]') == "waiting", "waiting phase")
        assert _text(browser, _weight("v2")) == "0%"
        repo.step_to(10)  # the controller's decision commit: the page follows by itself
        _wait(browser, lambda d: _text(d, _weight("v2")) == "10%", "v2 at 10%")
        assert _text(browser, _weight("v1")) == "90%"
        repo.step_to(25)
        _wait(browser, lambda d: _text(d, _weight("v2")) == "25%", "v2 at 25%")
        assert _text(browser, _weight("v1")) == "75%"
        browser.find_element("css selector", "#model-det summary").click()
        _shot(browser, tmp_path, "models")
        _all_loopback(_requested(browser))


def test_pause_by_click_is_a_commit_and_a_bad_step_is_a_message(browser, repo, tmp_path):
    from gitops.repo import Mirror

    with Served(UiConfig(gitops=str(repo.gitops), user="ada")) as app:
        browser.get(app.url + "#/proposals")
        _click(browser, f'button[data-approve="{repo.pr}"]')
        _wait(browser, lambda d: "merged" in _text(d, "#message.ok"), "merged")
        repo.step_to(10)
        browser.get(app.url + "#/models")
        browser.find_element("id", "who").clear()
        browser.find_element("id", "who").send_keys("Grace")
        _click(browser, 'button[data-action="pause"][data-model="det"]')
        _wait(browser, lambda d: "det: paused at 10%" in _text(d, "#message.ok"), "paused")
        with Mirror(repo.gitops) as mirror:
            head = mirror.log(mirror.sha("main") or "")[0]
        assert head.trailers["Mlops-Decision"] == "pause/human"
        assert head.trailers["Mlops-Requested-By"] == "Grace"
        _wait(browser, lambda d: _text(d, '[data-phase="det"]') == "paused", "paused phase")
        # approving a step of a paused canary: the CLI's refusal, in the page
        _click(browser, 'button[data-action="approve"][data-model="det"]')
        _wait(browser, lambda d: "nothing to approve (phase paused)" in _text(d, "#message.error"),
              "refusal shown")
        assert "Traceback" not in browser.page_source
        _wait(browser, lambda d: d.find_element(
            "css selector", 'button[data-action="resume"]').is_enabled(), "buttons back")
        _shot(browser, tmp_path, "refused")
        _all_loopback(_requested(browser))


def test_approving_changed_weights_is_refused_in_the_page(browser, repo, tmp_path):
    import subprocess

    import yaml

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
        browser.get(app.url + "#/proposals")
        _click(browser, f'button[data-approve="{repo.pr}"]')
        _wait(browser, lambda d: "refusing to merge" in _text(d, "#message.error"), "refusal")
        assert "carries weights sha256" in _text(browser, "#message.error")
        assert repo.state().candidate is None  # nothing merged
        browser.get(app.url + "#/runs")
        _wait(browser, lambda d: "train" in _text(d, ".dag"), "run steps")
        _click(browser, '.dag .step[data-task="train"]')
        _wait(browser, lambda d: "loss=0.4120" in _text(d, "pre.log"), "step log")
        assert "step 30/30" in _text(browser, '[data-training="train"]')
        assert "loss 0.4120" in _text(browser, '[data-training="train"]')
        _shot(browser, tmp_path, "runs")
        _all_loopback(_requested(browser))
