"""The PR body's section on the champion-vs-challenger comparison (`gate.json` of a paired gate).

Pure text from the gate step's record: per evaluation set, both models'
metrics on the same images with the difference's paired-bootstrap interval,
all sets pooled first (what the gate judges), the comparison in words and the
sample-size plan; AP@0.5 per class with the simultaneous band, classes shown
worse beyond their margin in bold; links to the pictures. Links are the
paths the evaluate step wrote (the run's output folder): a local forge's
reader opens them as they are; a hosted forge shows the link text.
"""

import pathlib
from typing import Any, Mapping

__all__ = ["same_images_section"]

_NAMES = {"map50": "mAP@0.5", "map": "mAP@[.5:.95]"}


def _interval(doc: Mapping[str, Any], signed: bool = False) -> str:
    fmt = "{:+.4f}" if signed else "{:.4f}"
    return (f"{fmt.format(doc['estimate'])} "
            f"[{fmt.format(doc['low'])}, {fmt.format(doc['high'])}]")


def _link(label: str, path: str) -> str:
    return f"[{label}]({pathlib.Path(path).as_uri()})" if path.startswith("/") else \
        f"[{label}]({path})"


def _plan_lines(gate: Mapping[str, Any]) -> list[str]:
    """What the evaluation images can tell (`promotion.decision.gate.plan`), and a warning
    when they are too few for the margin."""
    plan = gate.get("plan")
    if not isinstance(plan, Mapping):
        return []
    if plan["sd"] == 0:
        return [f"**Sample size.** The two models' detections do not differ on any of these "
                f"{plan['images']} images: every resample gives the same difference.", ""]
    lines = [f"**Sample size.** On these {plan['images']} images this run's interval rules out "
             f"a regression larger than {plan['rules_out']:.4f}; an equally good candidate "
             f"is shown non-inferior by {plan['margin']:.4f} {plan['power']:.1%} of the time "
             f"(95 % of the time for a margin of {plan['margin_for_power']:.4f}, or with about "
             f"{plan['images_needed']} images at this margin). `mlops gate plan` says the same "
             "for any margin.", ""]
    if not plan.get("enough", True):
        lines += [f"> **Warning:** the evaluation sets are too small for the margin "
                  f"{plan['margin']:.4f}: about {plan['images_needed']} images would show an "
                  "equally good candidate non-inferior 95 % of the time.", ""]
    return lines


def same_images_section(gate: Mapping[str, Any]) -> list[str]:
    """Markdown lines for a paired gate record (empty for a single-model gate)."""
    sets = gate.get("sets")
    if not isinstance(sets, list) or not sets:
        return []
    version = gate.get("production_version", "?")
    metric = gate.get("metric", "map50")
    lines = ["### Same images: candidate vs production", "",
             f"Production `{version}` and the candidate ran through the same serving code on "
             "the same images; differences are candidate − production with "
             f"{gate['paired_confidence']:.0%} paired-bootstrap intervals "
             f"({gate['paired_resamples']} resamples of the images, each set within itself). "
             "The gate judges all the sets together; each set alone and each class can only "
             "fail a candidate, on a regression shown beyond their margin.", "",
             "| images | metric | candidate | production | difference | comparison |",
             "|---|---|---:|---:|---:|---|"]
    rows = [("all sets", gate["images"], gate["pooled"], gate.get("comparison", ""))]
    rows += [(e["set"], e["images"], e["intervals"], e.get("comparison", "")) for e in sets]
    for label, images, intervals, comparison in rows:
        for key, name in _NAMES.items():
            cand, prod, diff = (intervals[k][key]
                                for k in ("candidate", "production", "difference"))
            lines.append(f"| {label} ({images}) | {name} | {_interval(cand)} | "
                         f"{_interval(prod)} | {_interval(diff, True)} | "
                         f"{comparison if key == metric else ''} |")
    lines.append("")
    lines += _plan_lines(gate)
    margin = gate.get("class_max_regression")
    for entry in sets:
        worse = set(entry.get("worse_classes", []))
        lines += [f"AP@0.5 per class on {entry['set']}: each model with its own "
                  f"{gate['paired_confidence']:.0%} interval; the difference with a "
                  f"{gate['class_confidence']:.0%} band simultaneous over all "
                  f"{gate.get('class_family', 0)} class differences of all sets"
                  + (f" (a class shown worse beyond {margin:.4f} in bold)" if margin is not None
                     else "") + ":", "",
                  "| class | candidate | production | difference |", "|---|---:|---:|---:|"]
        for cls in entry["classes"]:
            name = f"**{cls['name']}**" if cls["name"] in worse else cls["name"]
            diff = (_interval(cls["difference"], True) if cls.get("distinguished", True)
                    else f"{cls['difference']['estimate']:+.4f} (no image tells the models "
                         "apart: not judged)")
            lines.append(f"| {name} | {_interval(cls['candidate'])} | "
                         f"{_interval(cls['production'])} | {diff} |")
        pictures = entry.get("pictures") or {}
        if pictures:
            lines += ["", "Pictures: " + ", ".join(
                _link(label, pictures[key]) for key, label in
                (("disagreements", "where the models disagree most"),
                 ("pr_curves", "precision-recall curves")) if key in pictures)]
        lines.append("")
    return lines
