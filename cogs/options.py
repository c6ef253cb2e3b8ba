"""A settings model's refusal as the one line a person reads: each bad option named by its
flag, with the value given (`--workers 0: must be at least 1`)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping

if TYPE_CHECKING:  # only for the annotation: the CLI's parser imports this module
    import pydantic

__all__ = ["explain", "from_environment", "shown"]

_BOUNDS = {"greater_than_equal": ("ge", "at least"), "greater_than": ("gt", "more than"),
           "less_than_equal": ("le", "at most"), "less_than": ("lt", "less than")}


def from_environment(given: Mapping[str, Any], table: Mapping[str, str],
                     environ: Mapping[str, str]) -> dict[str, Any]:
    """`given` with each option of `table` ({option: variable}) it lacks taken from a
    non-empty variable of `environ`: the one way an option falls back to the environment."""
    out = dict(given)
    for option, variable in table.items():
        if option not in out and environ.get(variable):
            out[option] = environ[variable]
    return out


def shown(value: Any) -> str:
    """A value as it was typed: numbers plain (`0`, not `0.0`), text quoted."""
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)  # `:g` would write 1073741824 as 1.07374e+09
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else repr(value)
    return repr(value)


def explain(exc: pydantic.ValidationError, flags: Mapping[str, str] | None = None) -> str:
    """One clause per bad field, `; `-joined. A field is named `--field-name` unless
    `flags` names it otherwise (an option rendered from another command's flag); a rule
    over several fields (a model validator) is its own message, which names them."""
    lines = []
    for error in exc.errors():
        field = str(error["loc"][0]) if error["loc"] else ""
        ctx = error.get("ctx") or {}
        if error["type"] in _BOUNDS:
            key, words = _BOUNDS[error["type"]]
            problem = f"must be {words} {shown(ctx[key])}"
        elif error["type"] == "value_error":
            problem = str(ctx.get("error", error["msg"]))
        else:
            problem = error["msg"][:1].lower() + error["msg"][1:]
        if not field:
            lines.append(problem)
        else:
            flag = (flags or {}).get(field) or "--" + field.replace("_", "-")
            lines.append(f"{flag} {shown(error['input'])}: {problem}")
    return "; ".join(lines)
