"""Tell people what the controller did: a Slack-compatible webhook (`{"text": ...}`).

Slack incoming webhooks, Mattermost, Rocket.Chat and Discord's `/slack`
endpoint all accept a JSON body with a `text` field, so one payload reaches
them all. A notification is a courtesy, not part of the decision: a failing
webhook is logged and counted, never retried forever, and never blocks or
undoes a commit (the commit is the record; the message only points at it).
"""

from __future__ import annotations

import logging
import urllib.parse
from typing import Any, Mapping

import requests

__all__ = ["Notifier", "format_text"]

log = logging.getLogger("mlops.controller.notify")

_ICONS = {"step": ":arrow_up:", "promote": ":white_check_mark:", "rollback": ":rotating_light:",
          "manual": ":raised_hand:", "pause": ":double_vertical_bar:"}


def format_text(kind: str, subject: str, reason: str, commit: str | None = None,
                report: str | None = None) -> str:
    """One message in Slack's mrkdwn: icon, commit subject, reason, links."""
    text = f"{_ICONS.get(kind, ':information_source:')} *{subject}*\n{reason}"
    if commit:
        text += f"\ncommit `{commit[:12]}`"
    if report:
        text += f"\nreport: {report}"
    return text


class Notifier:
    """POSTs `{"text": ...}` to a webhook URL; failures are logged, not raised."""

    def __init__(self, url: str, *, timeout: float = 5.0,
                 session: requests.Session | None = None) -> None:
        self.url = url
        self.timeout = timeout
        self.session = session or requests.Session()
        self.failures = 0

    @property
    def host(self) -> str:
        """The webhook's host: what may be logged of its URL (the path is the secret)."""
        return urllib.parse.urlsplit(self.url).hostname or "?"

    def send(self, text: str, extra: Mapping[str, Any] | None = None) -> bool:
        """Post one message; True when the webhook answered 2xx."""
        payload: dict[str, Any] = {"text": text}
        payload.update(extra or {})
        try:
            resp = self.session.post(self.url, json=payload, timeout=self.timeout)
        except requests.RequestException as exc:
            # The exception's text repeats the URL, whose path is the secret of
            # a Slack-style webhook: log the class and the host only.
            self.failures += 1
            log.warning("notification webhook at %s unreachable (%s)", self.host,
                        type(exc).__name__)
            return False
        if not 200 <= resp.status_code < 300:
            self.failures += 1
            log.warning("notification webhook at %s answered HTTP %s", self.host,
                        resp.status_code)
            return False
        return True
