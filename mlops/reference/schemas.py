"""JSON Schemas of the three configuration files, from the pydantic models that read them.

- `mlops.yaml`: a model repo's `mlops.yaml`, from `workflows.config.ModelRepoConfig`, its
  `promotion.canary` the canary policy's schema;
- `settings`: the platform settings (`--settings settings.yaml`), from
  `workflows.settings.PipelineSettings`;
- `canary-policy`: a canary policy (`promotion.canary` of `mlops.yaml`), from
  `promotion.decision.policy.CanaryPolicy`.

The package ships them (`mlops/schemas/<name>.schema.json`, package data) so an editor
can validate and complete the files (`# yaml-language-server: $schema=...`) and
`mlops schema NAME` prints them without importing pydantic; a test holds the shipped
files equal to what `generate` makes now (`MLOPS_REGENERATE=1` rewrites them).
Validation-mode schemas: what a file may say, e.g. a duration as `30s` or seconds.
"""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any, Callable

__all__ = ["ALIASES", "NAMES", "SCHEMA_DIR", "generate", "load_model", "render", "schema_path",
           "shipped"]

SCHEMA_DIR = pathlib.Path(__file__).resolve().parents[1] / "schemas"
NAMES = ("mlops.yaml", "settings", "canary-policy")
#: Other spellings `mlops schema` accepts for each name.
ALIASES = {"mlops": "mlops.yaml", "mlops.yml": "mlops.yaml", "settings.yaml": "settings",
           "platform-settings": "settings", "canary": "canary-policy", "policy": "canary-policy"}


def schema_path(name: str) -> pathlib.Path:
    """The shipped file of a schema (`mlops/schemas/<name>.schema.json`)."""
    return SCHEMA_DIR / f"{name}.schema.json"


def shipped(name: str) -> str:
    """The shipped schema's text (no pydantic import: `mlops schema` prints this)."""
    return schema_path(name).read_text()


def load_model(name: str) -> type:
    """The pydantic model a schema is made from."""
    models: dict[str, Callable[[], type]] = {
        "mlops.yaml": _mlops_yaml, "settings": _settings, "canary-policy": _policy}
    return models[name]()


def _mlops_yaml() -> type:
    from workflows.config import ModelRepoConfig
    return ModelRepoConfig


def _settings() -> type:
    from workflows.settings import PipelineSettings
    return PipelineSettings


def _policy() -> type:
    from promotion.decision.policy import CanaryPolicy
    return CanaryPolicy


def _describe(schema: dict[str, Any], model: type) -> None:
    """Add the source's words on each field (`fielddocs`) as `description`s, recursively
    through the models the schema's `$defs` come from."""
    from mlops.reference.fielddocs import field_docs, model_doc

    def walk(target: dict[str, Any], cls: type) -> None:
        doc = model_doc(cls)
        if doc:
            target["description"] = doc
        docs = field_docs(cls)
        fields = getattr(cls, "model_fields", {})
        for name, prop in target.get("properties", {}).items():
            if name in docs and "description" not in prop:
                prop["description"] = docs[name]
            for sub in _models_in(fields[name].annotation) if name in fields else ():
                key = sub.__name__
                if key in schema.get("$defs", {}) and key not in seen:
                    seen.add(key)
                    walk(schema["$defs"][key], sub)

    seen: set[str] = set()
    walk(schema, model)


def _models_in(annotation: Any) -> list[type]:
    """Pydantic models named anywhere in a type annotation."""
    import typing

    from pydantic import BaseModel

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for arg in typing.get_args(annotation) for m in _models_in(arg)]


def generate(name: str) -> dict[str, Any]:
    """The schema of `name` as a dict, made from its model now."""
    model = load_model(name)
    schema: dict[str, Any] = model.model_json_schema(mode="validation")  # type: ignore[attr-defined]
    _describe(schema, model)
    if name == "mlops.yaml":
        # `promotion.canary` is carried as a mapping by the pipeline and checked by the
        # promotion room's own model when the controller loads it: the schema says what
        # that model accepts, so an editor completes and checks it in place.
        policy = generate("canary-policy")
        defs = schema.setdefault("$defs", {})
        for key, value in policy.pop("$defs", {}).items():
            defs.setdefault(key, value)
        policy.pop("$schema", None)
        defs["CanaryPolicy"] = policy
        canary = defs["PromotionConfig"]["properties"]["canary"]
        description = canary.get("description", "")
        defs["PromotionConfig"]["properties"]["canary"] = {
            "$ref": "#/$defs/CanaryPolicy", "default": canary.get("default", {}),
            **({"description": description} if description else {})}
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}


def render(name: str) -> str:
    """The schema's text as shipped: indented, keys in the model's order, one final newline."""
    return json.dumps(generate(name), indent=2, ensure_ascii=False) + "\n"


def resolved(name: str) -> dict[str, Any]:
    """A copy of the shipped schema (for validators and the reference pages)."""
    return copy.deepcopy(json.loads(shipped(name)))


if __name__ == "__main__":  # python -m mlops.reference.schemas: rewrite the shipped files
    SCHEMA_DIR.mkdir(exist_ok=True)
    for schema_name in NAMES:
        schema_path(schema_name).write_text(render(schema_name))
        print(schema_path(schema_name))
