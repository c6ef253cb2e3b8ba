"""One error contract (issue 12): every person-meant error of every room derives from
`contracts.errors.MlopsError` and the exit codes are distinct (the CLI reference's table is
made from the enum: tests/test_docs_site.py).
Before, exit 3 meant a conflict, a digest mismatch or a failed gate, and steps printed their
errors on stdout while the CLI used stderr."""

from __future__ import annotations

import importlib
import inspect
import pathlib
import pkgutil

from contracts.errors import ExitCode, MlopsError
from mlops.cli import main
from tests.rooms import ROOMS

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_each_exit_code_has_one_meaning():
    assert len(set(ExitCode)) == len(ExitCode.__members__)  # no alias: each code one meaning


def _modules():
    for room in ROOMS:
        package = importlib.import_module(room)
        yield package
        for info in pkgutil.walk_packages(package.__path__, f"{room}."):
            if info.name.rsplit(".", 1)[-1] == "__main__":  # runs the CLI when imported
                continue
            yield importlib.import_module(info.name)


def test_every_error_with_an_exit_code_is_an_mlops_error():
    seen = []
    for module in _modules():
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ != module.__name__ or not issubclass(cls, BaseException):
                continue
            if "exit_code" in vars(cls) or issubclass(cls, MlopsError):
                assert issubclass(cls, MlopsError), f"{cls.__module__}.{cls.__name__}"
                assert cls.exit_code in set(ExitCode), f"{cls.__name__}: {cls.exit_code}"
                seen.append(cls.__name__)
    assert {"ConflictError", "DigestMismatchError", "GateFailed", "PullRequestNotFound",
            "ArgoUnavailable", "ConfigError"} <= set(seen)


def test_step_and_cli_errors_go_to_stderr_with_their_code(tmp_path, capsys):
    code = main(["step", "gate", "--repo", str(tmp_path / "nowhere"), "--out", str(tmp_path)])
    out, err = capsys.readouterr()
    assert code == ExitCode.BAD_INPUT and err.startswith("error: ") and "error:" not in out
