"""The PR body's section on the champion-vs-challenger comparison (`gate.json` of a paired gate).

Pure text from the gate step's record: per evaluation set, both models'
metrics on the same images with the difference's paired-bootstrap interval
and the verdict in words; AP@0.5 per class with its (Bonferroni) interval,
classes significantly worse in bold; links to the pictures. Links are the
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


def same_images_section(gate: Mapping[str, Any]) -> list[str]:
    """Markdown lines for a paired gate record (empty for a single-model gate)."""
    sets = gate.get("sets")
    if not isinstance(sets, list) or not sets:
        return []
    version = gate.get("production_version", "?")
    lines = ["### Same images: candidate vs production", "",
             f"Production `{version}` and the candidate ran through the same serving code on "
             "the same images; differences are candidate − production with "
             f"{sets[0]['paired_confidence']:.0%} paired-bootstrap intervals "
             f"({sets[0]['paired_resamples']} resamples of the images).", "",
             "| set | metric | candidate | production | difference | verdict |",
             "|---|---|---:|---:|---:|---|"]
    for entry in sets:
        for key, name in _NAMES.items():
            cand, prod, diff = (entry["intervals"][k][key]
                                for k in ("candidate", "production", "difference"))
            verdict = entry["verdict"].split(":")[0] if key == entry["metric"] else ""
            lines.append(f"| {entry['set']} ({entry['images']} images) | {name} | "
                         f"{_interval(cand)} | {_interval(prod)} | {_interval(diff, True)} | "
                         f"{verdict} |")
    lines.append("")
    for entry in sets:
        worse = set(entry.get("worse_classes", []))
        lines += [f"AP@0.5 per class on {entry['set']} ({entry['class_confidence']:.1%} "
                  "intervals, Bonferroni over the classes; significantly worse in bold):", "",
                  "| class | candidate | production | difference |", "|---|---:|---:|---:|"]
        for cls in entry["classes"]:
            name = f"**{cls['name']}**" if cls["name"] in worse else cls["name"]
            lines.append(f"| {name} | {_interval(cls['candidate'])} | "
                         f"{_interval(cls['production'])} | "
                         f"{_interval(cls['difference'], True)} |")
        pictures = entry.get("pictures") or {}
        if pictures:
            lines += ["", "Pictures: " + ", ".join(
                _link(label, pictures[key]) for key, label in
                (("disagreements", "where the models disagree most"),
                 ("pr_curves", "precision-recall curves")) if key in pictures)]
        lines.append("")
    return lines
