"""Query presets: PromQL templates kept as data files, found by name.

Each preset is one YAML file in `presets/` with templates (`requests`, `errors`,
`latency`, ...) and the latency buckets' unit. Placeholders are `string.Template`'s
(`$model`, `$version`, `$namespace`, `$window`); `_substitute` is the one place values
go in, escaped. Each counted signal must be a sum of `increase()` of counter selectors,
which the source reads as raw counters (`counter_selectors`); another shape is refused
at load. An unknown preset name is an error listing the choices.
Why: docs/inside-promotion.md.
"""

from __future__ import annotations

import functools
import pathlib
import re
import string
from typing import Any, Literal, Mapping

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from promotion.errors import PresetError

__all__ = ["COUNTED", "PRESET_NAMES", "QueryPreset", "counter_selectors",
           "get_preset", "promql_string", "render_window"]

PRESET_DIR = pathlib.Path(__file__).with_name("presets")
PRESET_NAMES = frozenset(p.stem for p in PRESET_DIR.glob("*.yaml"))
PLACEHOLDERS = ("model", "version", "workload", "namespace", "window")
QueryKind = Literal["requests", "errors", "latency", "weight"]
COUNTED = ("requests", "errors", "latency")
"""The kinds read as counters (with every `quality` signal and `classes`)."""

_STRING = r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\''
_SELECTOR = (r"[A-Za-z_:][A-Za-z0-9_:]*\s*(?:\{(?:[^{}\"']|" + _STRING + r")*\})?"
             r"|\{(?:[^{}\"']|" + _STRING + r")*\}")
_INCREASE = re.compile(r"\bincrease\(\s*(?P<sel>" + _SELECTOR + r")\s*\[(?P<range>[^\]]*)\]\s*\)")
_GROUPING = re.compile(r"\b(?:by|without)\s*\([\w\s,]*\)")
_ZERO = re.compile(r"\bvector\(\s*0\s*\)")
_ALLOWED = frozenset({"sum", "or", "X", "0", "(", ")", "+"})
SHAPE_HELP = ("a sum of increase() of counter selectors over [$window], e.g. "
              "sum(increase(my_requests_total{app=\"$model\",version=\"$version\"}[$window]))")


def counter_selectors(promql: str, window: str) -> list[str] | None:
    """The counter selectors whose increases over `[window]` the query adds up, or None
    when it is not such a sum (only `sum`, `sum by/without (...)`, `+`, `or vector(0)`
    and parentheses around `increase(<selector>[<window>])` terms)."""
    found = []
    for match in _INCREASE.finditer(promql):
        if match.group("range").strip() != window:
            return None
        found.append(match.group("sel").strip())
    skeleton = _ZERO.sub(" 0 ", _GROUPING.sub(" ", _INCREASE.sub(" X ", promql)))
    tokens = re.findall(r"[A-Za-z_]\w*|\S", skeleton)
    if not found or any(t not in _ALLOWED for t in tokens):
        return None
    return found


def promql_string(value: str) -> str:
    """`value` escaped for the inside of a double-quoted PromQL string literal.

    PromQL strings take Go's escapes (prometheus/promql/parser/lex.go `lexString`,
    unquoted by `strconv.Unquote` in parser.go); a backslash, a double quote or a line
    break in a value would otherwise end the label matcher and let the value write
    its own query: `metrics.namespace` of a pushed canary policy could make a canary
    that failed 40 % of its requests read as 0 errors. Every value
    goes through here (`_substitute`), and `QueryPreset.from_mapping` refuses a
    template whose placeholder is not inside a double-quoted string, so the escaping
    holds by construction. Regex matchers (`=~"$x"`) still read the value as a regex:
    the values are label values checked at their boundary (Kubernetes names).
    """
    out = []
    for char in str(value):
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif ord(char) < 0x20 or ord(char) == 0x7f:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return "".join(out)


def _quoted_spans(template: str) -> list[tuple[int, int]]:
    """(start, end) of each double-quoted string literal's content in a PromQL template."""
    spans, i, quote, start = [], 0, "", 0
    while i < len(template):
        char = template[i]
        if quote:
            if char == "\\" and quote != "`":
                i += 2
                continue
            if char == quote:
                if quote == '"':
                    spans.append((start, i))
                quote = ""
        elif char in "\"'`":
            quote, start = char, i + 1
        i += 1
    return spans


def _substitute(template: str, values: Mapping[str, str]) -> str:
    """`template` with its placeholders filled in, every value but `$window` (a duration
    `render_window` made) escaped for the double-quoted string it sits in."""
    return string.Template(template).substitute(
        {k: v if k == "window" else promql_string(v) for k, v in values.items()})


class QueryPreset(BaseModel):
    """Three PromQL templates and the unit of the latency histogram's `le`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    description: str = ""
    latency_unit: Literal["seconds", "milliseconds"] = "seconds"
    requests: str
    errors: str
    latency: str | None = None
    quality: dict[str, str] = {}
    """Model-quality signals: name -> a `sum by (le)` histogram query of what the
    model answered (the model server's own metrics, whichever router counts
    the requests)."""
    weight: str | None = None
    """The router's live weight of one version (a gauge, for charts; None: the router
    keeps no weight in Prometheus, e.g. Istio's weights live in the VirtualService)."""
    classes: str | None = None
    """Detections by class: a `sum by (class)` query of the model server's
    `model_class_detections_total` (the class-mix check); None: not measured."""

    @classmethod
    def from_mapping(cls, name: str, data: Mapping[str, Any]) -> QueryPreset:
        """Validate a preset (file content or a policy's custom queries)."""
        try:
            preset = cls.model_validate({"name": name, **dict(data)})
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors())
            raise PresetError(f"metrics preset {name!r}: {problems}") from None
        templates = {kind: getattr(preset, kind) for kind in ("requests", "errors", "latency")}
        templates.update({f"quality.{signal}": q for signal, q in preset.quality.items()})
        templates["classes"] = preset.classes
        templates["weight"] = preset.weight
        for kind, template in templates.items():
            if template is None:
                continue
            quoted = _quoted_spans(template)
            for match in string.Template.pattern.finditer(template):
                placeholder = match.group("named") or match.group("braced")
                if placeholder and placeholder not in PLACEHOLDERS:
                    raise PresetError(
                        f"metrics preset {name!r}, query {kind!r}: unknown placeholder "
                        f"${placeholder}; use {', '.join('$' + p for p in PLACEHOLDERS)}")
                inside = any(a <= match.start() < b for a, b in quoted)
                if placeholder and placeholder != "window" and not inside:
                    raise PresetError(
                        f"metrics preset {name!r}, query {kind!r}: ${placeholder} must be "
                        f"inside a double-quoted label value (label=\"${placeholder}\"), "
                        "where it is escaped")
            if kind != "weight" and counter_selectors(template, "$window") is None:
                raise PresetError(
                    f"metrics preset {name!r}, query {kind!r}: the canary counts exactly "
                    f"from the raw counters a query names, so write it as {SHAPE_HELP} "
                    f"(got {template.strip()!r})")
        return preset

    def render_quality(self, **values: str) -> dict[str, str]:
        """Each quality signal's query with placeholders filled in."""
        return {signal: _substitute(template, values)
                for signal, template in sorted(self.quality.items())}

    def render_classes(self, **values: str) -> str | None:
        """The class-count query with placeholders filled in (None: not measured)."""
        return None if self.classes is None else _substitute(self.classes, values)

    @property
    def latency_scale(self) -> float:
        """Factor that turns the histogram's `le` into seconds."""
        return 0.001 if self.latency_unit == "milliseconds" else 1.0

    def render(self, kind: QueryKind, **values: str) -> str | None:
        """The query `kind` with placeholders filled in (None: no such query)."""
        template = getattr(self, kind)
        if template is None:
            return None
        return _substitute(template, values)


@functools.lru_cache(maxsize=None)
def get_preset(name: str) -> QueryPreset:
    """The preset called `name`; an unknown name lists the choices."""
    if name not in PRESET_NAMES:
        raise PresetError(
            f"unknown metrics preset {name!r}; choose one of {', '.join(sorted(PRESET_NAMES))} "
            "or 'custom' with your own queries")
    data = yaml.safe_load((PRESET_DIR / f"{name}.yaml").read_text())
    return QueryPreset.from_mapping(name, data)


def render_window(seconds: float) -> str:
    """A PromQL range duration for `seconds` (`30s`, `1m`, `90s`, `1500ms`)."""
    if seconds <= 0:
        raise PresetError(f"window must be positive, got {seconds!r}")
    millis = int(round(seconds * 1000))
    if millis % 60000 == 0:
        return f"{millis // 60000}m"
    if millis % 1000 == 0:
        return f"{millis // 1000}s"
    return f"{millis}ms"
