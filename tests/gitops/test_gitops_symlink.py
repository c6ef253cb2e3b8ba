"""A symbolic link committed to the GitOps repo freezes nothing (hardening finding 7).

Before: `Mirror.export` extracted with tarfile's `data` filter, which raises
`AbsoluteLinkError` on a link to `/etc/passwd`; the controller caught only
`GitOpsError`, so every tick failed and canaries froze at a partial weight,
and the sync loop failed every tick. Real git and the real controller; the
metric source is the scripted `RouterStub` (see test_promotion_controller.py).
"""

import os
import pathlib

from gitops.git import Identity
from gitops.repo import Mirror
from gitops.writeback import Message, WriteBack
from promotion.controller import Controller, ControllerConfig
from tests.fixtures.promotion_controller import (
    MODEL,
    Clock,
    RouterStub,
    decision_log,
    merge_to_main,
    merged_at,
)


def _commit_links(repo: pathlib.Path) -> None:
    def change(root: pathlib.Path) -> None:
        os.symlink("/etc/passwd", root / "apps" / MODEL / "evil.yaml")
        os.symlink("../..", root / "apps" / "loop")

    WriteBack(str(repo), identity=Identity("Ada Human", "ada@example.com")).commit(
        "main", change, Message("links, by hand")
    )


def test_export_leaves_links_out_and_keeps_the_files(promotion_repo, tmp_path):
    _commit_links(promotion_repo)
    with Mirror(str(promotion_repo)) as mirror:
        mirror.fetch()
        mirror.export("main", tmp_path / "tree")
    folder = tmp_path / "tree" / "apps" / MODEL
    assert (folder / "promotion.yaml").is_file()
    assert not (folder / "evil.yaml").exists() and not (folder / "evil.yaml").is_symlink()
    assert not (tmp_path / "tree" / "apps" / "loop").exists()


def test_controller_keeps_deciding_with_a_link_in_the_repo(promotion_repo, tmp_path):
    merge_to_main(promotion_repo, "v2")
    _commit_links(promotion_repo)
    clock = Clock(merged_at(promotion_repo))
    controller = Controller(ControllerConfig(repo=str(promotion_repo), workdir=tmp_path / "work"),
                            RouterStub(promotion_repo), clock=clock)
    for _ in range(15):
        clock.advance(1.0)
        controller.tick()
    assert controller.last_error is None
    assert decision_log(promotion_repo), "the canary froze: no decision was committed"
