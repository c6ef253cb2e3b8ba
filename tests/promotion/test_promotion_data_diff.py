"""The PR shows what changed in the data since production's model (issue 29).

Two trained-looking model directories carry the dataset lock prepare-data verified
(`datalock.json`, as the evaluate step copies it); production is proposed and merged
into a real bare GitOps repo with the local forge, then the candidate's PR body is read
back. The locks are real snapshots of two weeks of a small COCO dataset.
"""

import json
import pathlib
import shutil

from contracts.artifact import LOCK_FILE
from datapins.lock import write_lock
from datapins.snapshot import snapshot
from datapins.sources import DirectorySource
from gitops.forges.local import LocalForge
from gitops.repo import init_repo
from promotion.decision.policy import load_policy
from promotion.gitrepo.propose import propose
from promotion.reports.data_report import data_report
from tests.fixtures.data import edit_annotations, write_coco_dataset
from tests.fixtures.production import fake_model_dir, put_in_production


def _weeks(tmp_path: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Week 1, and week 2: two train images retired, their boxes gone with them."""
    week1 = write_coco_dataset(tmp_path / "week-1", {"train": 6, "val": 2})
    week2 = tmp_path / "week-2"
    shutil.copytree(week1, week2)

    def retire(coco):
        gone = {i["id"] for i in coco["images"][:2]}
        coco["images"] = coco["images"][2:]
        coco["annotations"] = [a for a in coco["annotations"] if a["image_id"] not in gone]
    edit_annotations(week2, "train", retire)
    return week1, week2


def _pinned(folder: pathlib.Path, source: pathlib.Path, name: str) -> pathlib.Path:
    write_lock(snapshot(DirectorySource(source), name), folder / LOCK_FILE)
    return folder


def test_the_candidates_pr_shows_the_data_diff_against_production(tmp_path):
    week1, week2 = _weeks(tmp_path)
    gitops = tmp_path / "gitops.git"
    init_repo(gitops)
    # production: proposed and merged with its week-1 lock beside model.yaml
    prod = fake_model_dir(tmp_path / "models", "shapes", "v1", {"map50": 0.9})
    _pinned(prod, week1, "shapes-w1")
    propose(prod, str(gitops), LocalForge(gitops), load_policy({}), approval="auto")
    cand = _pinned(fake_model_dir(tmp_path / "models", "shapes", "v2", {"map50": 0.92}),
                   week2, "shapes-w2")
    opened = propose(cand, str(gitops), LocalForge(gitops), load_policy({}))
    body = LocalForge(gitops).get_pr(opened.pr_number).body
    assert "### Data" in body, body
    assert "**Data: shapes-w1 → shapes-w2**: +0 images, 2 removed" in body, body
    assert "| train | 6 | 4 | +0 | -2 |" in body and "| val | 2 | 2 | +0 | -0 |" in body
    assert "label shift (TVD)" in body


def test_no_pin_no_section_and_an_unpinned_production_is_said_plainly(tmp_path):
    week1, _ = _weeks(tmp_path)
    gitops = tmp_path / "gitops.git"
    init_repo(gitops)
    put_in_production(gitops, tmp_path / "models", "shapes", "v1", {"map50": 0.9})
    plain = fake_model_dir(tmp_path / "models", "shapes", "v2", {"map50": 0.92})
    assert data_report(plain, None) is None  # a repo without pins: no Data section
    cand = _pinned(fake_model_dir(tmp_path / "models", "shapes", "v3", {"map50": 0.92}),
                   week1, "shapes-w1")
    opened = propose(cand, str(gitops), LocalForge(gitops), load_policy({}))
    body = LocalForge(gitops).get_pr(opened.pr_number).body
    digest = json.loads((cand / LOCK_FILE).read_text())["digest"]
    assert (f"**Data: shapes-w1** (`{digest}`), 8 images; production's data is not pinned, "
            "so there is nothing to compare with.") in body, body
