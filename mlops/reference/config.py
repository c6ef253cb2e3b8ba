"""The configuration reference pages, generated from the JSON Schemas and their models.

One page per file (`mlops.yaml`, the platform settings, the canary policy): a section per
object, found by walking the schema from its root (named by the YAML path where it first
appears: `training.smoke`), and a row per field with its type, default, bounds and the
words the model's source gives it (`fielddocs`). The schema is the one `mlops schema`
prints, made from the same pydantic model, so the page, the schema and the loader agree.
"""

from __future__ import annotations

import json
from typing import Any

from mlops.reference.schemas import generate, load_model

__all__ = ["PAGES", "markdown"]

#: name -> (page file, title, what the file is, where it is read)
PAGES = {
    "mlops.yaml": ("reference/mlops-yaml.md", "`mlops.yaml` reference",
                   "A model repo's configuration: the training command and jobs, the data "
                   "pins, the evaluation, the gate, serving and promotion. Read once, when a "
                   "step or command loads the repo (`workflows/config.py`); an unknown field "
                   "or a value out of bounds is an error naming the file and the field."),
    "settings": ("reference/settings.md", "Platform settings reference",
                 "How one platform runs every model repo: images, Secrets, storage, limits, "
                 "triggers (`mlops workflows render --settings settings.yaml`, also "
                 "`mlops run --settings`; `workflows/settings.py`). Every field has a default "
                 "that renders a complete, valid set of manifests."),
    "canary-policy": ("reference/canary-policy.md", "Canary policy reference",
                      "How the promotion controller judges a canary: steps, interval, the "
                      "statistics and their limits, the model-quality checks. It is the "
                      "`promotion.canary` section of `mlops.yaml` (a platform's GitOps repo "
                      "may bound it in `mlops-gitops.yaml`'s `policy:`); "
                      "`promotion/decision/policy.py`. Durations are seconds or strings such "
                      "as `30s`, `1m`, `1h30m`."),
}


def _cell(text: str) -> str:
    from mlops.reference.cli import _cell as cell

    return cell(text)


def _json(value: Any) -> str:
    return json.dumps(value, separators=(", ", ": "), ensure_ascii=False)


def _anchor(path: str) -> str:
    return "field-" + "".join(c if c.isalnum() else "-" for c in path.lower()).strip("-")


class _Page:
    def __init__(self, name: str) -> None:
        self.name = name
        self.schema = generate(name)
        self.defs: dict[str, Any] = self.schema.get("$defs", {})
        self.sections: dict[str, str] = {}  # def name -> anchor of its section
        self.paths: dict[str, list[str]] = {}  # def name -> the YAML paths that use it
        self.bodies: list[tuple[str | None, list[str]]] = []  # (def name, lines)
        self.out: list[str] = []
        self.queue: list[tuple[str, dict[str, Any], type | None]] = []

    def ref_name(self, node: dict[str, Any]) -> str | None:
        ref = node.get("$ref", "")
        return ref.rsplit("/", 1)[-1] if ref.startswith("#/$defs/") else None

    def link(self, def_name: str, path: str, model: type | None) -> str:
        if self.name == "mlops.yaml" and def_name == "CanaryPolicy":
            return "[canary policy](canary-policy.md)"
        if def_name not in self.sections:
            self.sections[def_name] = _anchor(path)
            self.queue.append((path, self.defs[def_name], model))
        self.paths.setdefault(def_name, [])
        if path not in self.paths[def_name]:
            self.paths[def_name].append(path)
        return f"[{def_name}](#{self.sections[def_name]})"

    def type_of(self, node: dict[str, Any], path: str, model: type | None) -> str:
        name = self.ref_name(node)
        if name:
            return self.link(name, path, model)
        if "anyOf" in node:
            kinds = [k for k in node["anyOf"] if k.get("type") != "null"]
            text = " or ".join(self.type_of(k, path, model) for k in kinds)
            return text + (" or null" if len(kinds) < len(node["anyOf"]) else "")
        if "const" in node:
            return f"`{_json(node['const'])}`"
        if "enum" in node:
            return "one of " + ", ".join(f"`{_json(v)}`" for v in node["enum"])
        kind = node.get("type")
        if kind == "array":
            items = node.get("items")
            return "list of " + (self.type_of(items, path, model) if items else "anything")
        if kind == "object":
            extra = node.get("additionalProperties")
            if isinstance(extra, dict) and extra:
                return "mapping of string to " + self.type_of(extra, path, model)
            return "mapping"
        return {"string": "string", "integer": "integer", "number": "number",
                "boolean": "boolean", None: "anything"}.get(kind, str(kind))

    @staticmethod
    def bounds(node: dict[str, Any]) -> str:
        parts = []
        for branch in node.get("anyOf", [node]):
            for key, sign in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="),
                              ("exclusiveMaximum", "<"), ("minLength", "length >="),
                              ("maxLength", "length <="), ("minItems", "items >="),
                              ("maxItems", "items <=")):
                if key in branch:
                    parts.append(f"{sign} {branch[key]}")
            if "pattern" in branch:
                parts.append(f"matches `{branch['pattern']}`")
            items = branch.get("items")
            if isinstance(items, dict) and "$ref" not in items:
                inner = _Page.bounds(items)
                if inner:
                    parts.append(f"each {inner}")
        return "; ".join(dict.fromkeys(parts))

    def default(self, node: dict[str, Any], field: Any) -> str:
        if "default" in node:
            return f"`{_json(node['default'])}`"
        if field is not None and not field.is_required():
            from pydantic import TypeAdapter

            value = field.get_default(call_default_factory=True)
            return f"`{_json(TypeAdapter(Any).dump_python(value, mode='json'))}`"
        return ""

    def section(self, path: str, node: dict[str, Any], model: type | None,
                def_name: str | None) -> None:
        fields = getattr(model, "model_fields", {}) if model is not None else {}
        lines: list[str] = []
        self.bodies.append((def_name, lines))
        if node.get("description"):
            lines += [" ".join(node["description"].split()), ""]
        required = set(node.get("required", []))
        lines += ["| field | type | default | bounds | meaning |", "|---|---|---|---|---|"]
        for key, prop in node.get("properties", {}).items():
            sub_path = f"{path}.{key}" if path else key
            field = fields.get(key)
            sub_model = None
            if field is not None:
                from mlops.reference.schemas import _models_in

                models = _models_in(field.annotation)
                sub_model = models[0] if models else None
            kind = self.type_of(prop, sub_path, sub_model)
            default = "**required**" if key in required else self.default(prop, field)
            lines.append(f"| `{key}` | {kind} | {default} | {_cell(self.bounds(prop))} | "
                         f"{_cell(prop.get('description', ''))} |")
        lines.append("")

    def render(self) -> str:
        page, title, intro = PAGES[self.name]
        self.out = [f"# {title}", "", intro, "",
                    f"Generated from the model at each docs build; the same fields as the "
                    f"JSON Schema `mlops schema {self.name}` prints (shipped as "
                    f"`mlops/schemas/{self.name}.schema.json`; the "
                    f"[schemas page](schemas.md) says how an editor uses it).", ""]
        self.section("", self.schema, load_model(self.name), None)
        while self.queue:
            path, node, model = self.queue.pop(0)
            self.section(path, node, model, next(k for k, v in self.defs.items() if v is node))
        for def_name, lines in self.bodies:
            if def_name is None:
                self.out += ["## Top level {#top-level}", ""]
            else:
                titles = ", ".join(f"`{p}`" for p in self.paths[def_name])
                self.out += [f"## {titles} {{#{self.sections[def_name]}}}", ""]
            self.out += lines
        return "\n".join(self.out)


def markdown(name: str) -> str:
    """The reference page of one configuration file."""
    return _Page(name).render()
