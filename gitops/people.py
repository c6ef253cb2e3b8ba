"""Who acts: the person a command or a button names, and their git identity.

A person is named by one line of text (`--by`, the UI's "as" field, an auth
proxy's user header). Commits that a person asks for carry the name in a
trailer (`Mlops-Requested-By:`); the one commit a person *makes* -- the merge
that approves a proposal -- is authored by them. Git needs an e-mail for that:
`Name <mail>` gives its own, a bare name gets one under `.invalid` (RFC 2606:
a domain that can never receive mail, so nobody mistakes it for a real address)
and never the bot's, which the triggers skip.
"""

from __future__ import annotations

import getpass
import os
import re

from gitops.git import BOT_IDENTITY, Identity

__all__ = ["current_user", "identity_of"]

_NAME_MAIL = re.compile(r"^\s*(?P<name>[^<>]+?)\s*<(?P<mail>[^<>\s]+@[^<>\s]+)>\s*$")


def current_user(by: str | None = None) -> str:
    """`by` when given, else the login name (a container without a passwd entry: $USER)."""
    if by:
        return str(by)
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in a container
        return os.environ.get("USER", "human")


def identity_of(person: str) -> Identity:
    """The git identity a person's own commit is authored with (pure)."""
    found = _NAME_MAIL.match(person)
    if found:
        name, mail = found["name"], found["mail"]
    else:
        name = person.strip() or "human"
        local = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.").lower() or "human"
        mail = f"{local}@users.mlops.invalid"
    if mail.lower() == BOT_IDENTITY.email:  # a person is never the bot the triggers skip
        mail = f"not-{mail}"
    return Identity(name=name, email=mail)
