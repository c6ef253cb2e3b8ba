"""Argo's little languages, as far as the local runner needs them. Pure.

* `{{...}}` substitution (`{{tasks.gate.outputs.parameters.passed}}`,
  `{{workflow.name}}`, `{{inputs.parameters.image}}`): an unknown name is an
  error naming it, never a silent empty string.
* `$(VAR)` expansion in command/args, as the kubelet does from a
  container's env (unknown names stay as written, like Kubernetes).
* `when` conditions (govaluate: `==`, `!=`, `<`, `>`, `<=`, `>=`, `&&`,
  `||`, `!`, parentheses, quoted strings, numbers, true/false).
* `depends` expressions (`a && b.Succeeded || !c.Failed`), where a bare
  task name means Argo's default: Succeeded, Skipped or Daemoned.
"""

import re
from collections.abc import Callable, Mapping

from contracts.errors import ExitCode, MlopsError

_BRACES = re.compile(r"\{\{\s*([^{}]+?)\s*\}\}")
_TOKEN = re.compile(
    r"\s*(?:(?P<op>==|!=|<=|>=|&&|\|\||[()<>!])|(?P<str>'[^']*'|\"[^\"]*\")|(?P<word>[^\s()<>!=&|]+))"
)
TASK_RESULTS = ("Succeeded", "Failed", "Errored", "Skipped", "Omitted", "Daemoned")


class ExpressionError(MlopsError, ValueError):
    """An expression the runner cannot resolve or parse; the message shows it."""

    exit_code = ExitCode.BAD_INPUT


def substitute(text: str, scope: Mapping[str, str], where: str = "") -> str:
    """Replace every `{{name}}` from `scope`; unknown names are an error."""

    def repl(match: re.Match[str]) -> str:
        key = match.group(1)
        if key not in scope:
            raise ExpressionError(
                f"{where}: unresolved {{{{{key}}}}}" if where else f"unresolved {{{{{key}}}}}"
            )
        return str(scope[key])

    return _BRACES.sub(repl, text)


def _tokens(text: str) -> list[tuple[str, str]]:
    pos, out = 0, []
    text = text.strip()
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match or match.end() == pos:
            raise ExpressionError(f"cannot parse {text!r} at {text[pos:]!r}")
        kind = match.lastgroup or "word"
        out.append((kind, match.group(kind)))
        pos = match.end()
    return out


class _Parser:
    """Recursive descent: or > and > not > comparison > atom."""

    def __init__(self, text: str, atom: Callable[[str], object]):
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0
        self.atom = atom

    def parse(self) -> object:
        value = self._or()
        if self.i != len(self.tokens):
            raise ExpressionError(
                f"cannot parse {self.text!r}: unexpected {self.tokens[self.i][1]!r}"
            )
        return value

    def _peek(self) -> str | None:
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def _or(self) -> object:
        left = self._and()
        while self._peek() == "||":
            self.i += 1
            right = self._and()
            left = _truth(left) or _truth(right)
        return left

    def _and(self) -> object:
        left = self._not()
        while self._peek() == "&&":
            self.i += 1
            right = self._not()
            left = _truth(left) and _truth(right)
        return left

    def _not(self) -> object:
        if self._peek() == "!":
            self.i += 1
            return not _truth(self._not())
        return self._cmp()

    def _cmp(self) -> object:
        left = self._primary()
        op = self._peek()
        if op in ("==", "!=", "<", ">", "<=", ">="):
            self.i += 1
            right = self._primary()
            return _compare(left, op, right)
        return left

    def _primary(self) -> object:
        if self.i >= len(self.tokens):
            raise ExpressionError(f"cannot parse {self.text!r}: ends too early")
        kind, value = self.tokens[self.i]
        self.i += 1
        if value == "(":
            inner = self._or()
            if self._peek() != ")":
                raise ExpressionError(f"cannot parse {self.text!r}: missing ')'")
            self.i += 1
            return inner
        if kind == "str":
            return value[1:-1]
        if kind == "op":
            raise ExpressionError(f"cannot parse {self.text!r}: unexpected {value!r}")
        return self.atom(value)


def _truth(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str):
        if value in ("true", "false"):
            return value == "true"
        raise ExpressionError(f"{value!r} is not a boolean")
    return bool(value)


def _number(value: object) -> float | None:
    try:
        return float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None


def _compare(left: object, op: str, right: object) -> bool:
    ln, rn = _number(left), _number(right)
    if isinstance(left, bool) or isinstance(right, bool):
        a, b = str(left).lower(), str(right).lower()
    elif ln is not None and rn is not None:
        a, b = ln, rn  # type: ignore[assignment]
    else:
        a, b = str(left), str(right)
    if op == "==":
        return a == b
    if op == "!=":
        return a != b
    if op in ("<", ">", "<=", ">=") and not (ln is not None and rn is not None):
        raise ExpressionError(f"{left!r} {op} {right!r}: ordering needs numbers")
    return {"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op]


def eval_when(text: str) -> bool:
    """Evaluate a `when` condition whose `{{...}}` are already substituted."""
    return _truth(_Parser(text, lambda word: word).parse())


def depends_on(text: str) -> list[str]:
    """Task names a `depends` expression refers to, in order of appearance."""
    names: list[str] = []
    for kind, value in _tokens(text):
        if kind == "word":
            name = value.split(".")[0]
            if name not in names:
                names.append(name)
    return names


def eval_depends(text: str, status: Mapping[str, str]) -> bool:
    """Evaluate `depends` against finished tasks' phases (Succeeded, Failed, ...)."""

    def atom(word: str) -> bool:
        name, _, result = word.partition(".")
        if name not in status:
            raise ExpressionError(f"depends {text!r}: no task named {name!r}")
        phase = status[name]
        if not result:
            return phase in ("Succeeded", "Skipped", "Daemoned")
        if result == "AnySucceeded":
            return phase == "Succeeded"
        if result == "AllFailed":
            return phase in ("Failed", "Errored")
        if result not in TASK_RESULTS:
            raise ExpressionError(f"depends {text!r}: unknown result {result!r}")
        return phase == result

    return _truth(_Parser(text, atom).parse())
