"""What a person reads: the PR body's sections, the comparison's pictures, the notices."""

__all__ = [
    "comparison_pictures",  # where champion and challenger disagree, and PR curves
    "data_report",          # the PR's data section
    "notify",               # Notifier: a Slack-compatible webhook
    "report_paired",        # the PR body's champion-vs-challenger section
]
