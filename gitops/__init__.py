"""The GitOps room: the desired state in git, written back safely, approved by PRs.

Doors (the modules other rooms import; each says *why* in its docstring):

* :mod:`gitops.layout` -- where files live in the GitOps repo
  (``apps/<model>/...``, ``argocd/<model>.yaml``); :func:`~gitops.layout.write_model`
  and :func:`~gitops.layout.read_model` / :class:`~gitops.layout.ModelState`
  (``.deployments``, ``.weights()``, ``.extra["promotion.yaml"]``).
* :mod:`gitops.writeback` -- :class:`~gitops.writeback.WriteBack`: one decision,
  one commit with ``Mlops-*`` trailers; rebase-and-retry on a moved remote,
  stop on a conflict, never force; idempotent.
* :mod:`gitops.repo` -- :func:`~gitops.repo.init_repo` (``mlops gitops init``)
  and :class:`~gitops.repo.Mirror` (read any commit: ``sha``, ``show``, ``log``,
  ``export``) -- what the local sync loop uses to read ``main``.
* :mod:`gitops.proposal` -- :func:`~gitops.proposal.propose`: branch + PR, once.
* :mod:`gitops.approval` -- :func:`~gitops.approval.approve`: digest check, merge.
* :mod:`gitops.forges` -- the :class:`~gitops.forges.base.Forge` protocol, one
  module per backend, :mod:`gitops.forges.registry` to pick one by name.
* :mod:`gitops.errors` -- user-facing errors, each with an ``exit_code``.

This package imports neither ``workflows`` nor ``promotion``; it drives the
real ``git`` CLI (2.38 or newer).
"""
