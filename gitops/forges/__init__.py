"""Forges: pull requests as approvals, one module per backend behind one Protocol.

See :mod:`gitops.forges.base` for the interface and
:mod:`gitops.forges.registry` for choosing a backend by name.
"""
