"""Training resource templates (`training-small|medium|large`) and overrides.

A job in `mlops.yaml` names a template and may override any of its fields
(`workers`, `gpus`, `cpu`, `memory`, `shm`, `image`) or any of its training
arguments (`epochs: 1` is shorthand for `args: {epochs: 1}`). An unknown
template or field is a config error naming the choices, so a typo never
silently trains with the default.
"""

import pathlib
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from contracts.names import MAX_WORKERS
from workflows.errors import ConfigError

TEMPLATE_DIR = pathlib.Path(__file__).resolve().parent / "templates"


class ResourceTemplate(BaseModel):
    """What one training job gets: workers and the resources of each."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    workers: int = Field(ge=1, le=MAX_WORKERS)  # worker indexes fit the derived names
    gpus: int = Field(ge=0)
    cpu: str
    memory: str
    shm: str = "1Gi"
    image: str
    args: dict[str, Any] = Field(default_factory=dict)


def template_names() -> list[str]:
    """The templates this installation ships."""
    return sorted(p.stem for p in TEMPLATE_DIR.glob("*.yaml"))


def load_template(name: str) -> ResourceTemplate:
    """Load a shipped template by name; unknown names list the choices."""
    path = TEMPLATE_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(
            f"unknown resource template {name!r}; choose one of: {', '.join(template_names())}"
        )
    data = yaml.safe_load(path.read_text()) or {}
    try:
        return ResourceTemplate(name=name, **data)
    except ValidationError as exc:  # a broken shipped template is our bug, say where
        raise ConfigError(f"{path}: {exc}") from exc


_FIELDS = ("workers", "gpus", "cpu", "memory", "shm", "image")


def apply_overrides(
    template: ResourceTemplate, overrides: dict[str, Any], where: str = "overrides"
) -> ResourceTemplate:
    """Return the template with `overrides` applied, refusing unknown keys."""
    fields: dict[str, Any] = template.model_dump()
    args = dict(template.args)
    for key, value in overrides.items():
        if key in _FIELDS:
            fields[key] = value
        elif key == "args":
            if not isinstance(value, dict):
                raise ConfigError(f"{where}.args: expected a mapping of argument -> value")
            args.update(value)
        elif key in args:
            args[key] = value
        else:
            choices = ", ".join([*_FIELDS, "args", *sorted(args)])
            raise ConfigError(
                f"{where}.{key}: unknown field for template {template.name!r}; "
                f"expected one of: {choices}"
            )
    fields["args"] = args
    try:
        return ResourceTemplate(**fields)
    except ValidationError as exc:
        problems = "; ".join(
            f"{where}.{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(problems) from exc
