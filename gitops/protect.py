"""Protect a bare repository's main branch: no history rewrite, no deletion.

A ``pre-receive`` hook, installed in the bare repositories ``mlops gitops init`` and
``mlops hooks init-bare`` make, refuses a non-fast-forward update and the deletion of the
protected branch, with a message naming the branch and the rule; other branches are left
alone. Why a hook, and the forges' equivalent: docs/inside-foundations.md.
"""

from __future__ import annotations

import pathlib
import stat

__all__ = ["HOOK_MARK", "PRE_RECEIVE", "protect_branch"]

HOOK_MARK = "mlops: protected branch"

#: Reads `old new ref` lines on stdin, as git's pre-receive hook contract says
#: (githooks(5)); any non-zero exit refuses the whole push.
PRE_RECEIVE = """#!/bin/sh
# {mark}: refuse force pushes to, and deletion of, refs/heads/{branch}.
zero=0000000000000000000000000000000000000000
status=0
while read -r old new ref; do
    [ "$ref" = "refs/heads/{branch}" ] || continue
    if [ "$new" = "$zero" ]; then
        echo "refused: deleting {branch} is not allowed (mlops protects its history)" >&2
        status=1
    elif [ "$old" != "$zero" ] && ! git merge-base --is-ancestor "$old" "$new"; then
        echo "refused: non-fast-forward update of {branch} (force push); mlops protects its" \\
             "history: pull, rebase your commits on top, push again" >&2
        status=1
    fi
done
exit $status
"""


def protect_branch(bare: pathlib.Path, branch: str = "main") -> pathlib.Path:
    """Install (or refresh) the protecting ``pre-receive`` hook; returns its path.

    A ``pre-receive`` hook that mlops did not write is kept, and the call
    raises ``FileExistsError`` naming it: replacing someone's hook silently
    would drop whatever it enforced.
    """
    hook = pathlib.Path(bare) / "hooks" / "pre-receive"
    if hook.exists() and HOOK_MARK not in hook.read_text(errors="replace"):
        raise FileExistsError(f"{hook}: a pre-receive hook that mlops did not write exists")
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(PRE_RECEIVE.format(mark=HOOK_MARK, branch=branch))
    hook.chmod(hook.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return hook
