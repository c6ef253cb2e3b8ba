"""The promotion room's exceptions live in one module, `promotion/errors.py`, the one a
reader opens to see what can go wrong; each keeps its bases and exit code."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import promotion
from promotion import errors

# name -> (bases, exit code or None): what each subclasses is part of its contract
# (callers catch ValueError, RuntimeError or RollbackError; the CLI exits with the code).
EXPECTED = {
    "SettingsError": (("MlopsError",), 2),
    "PolicyError": (("MlopsError", "ValueError"), 2),
    "StateError": (("MlopsError", "ValueError"), 2),
    "PresetError": (("MlopsError", "ValueError"), 2),
    "SteeringError": (("MlopsError", "ValueError"), 2),
    "ProductionError": (("MlopsError",), 2),
    "ProposeError": (("MlopsError",), 2),
    "RollbackError": (("MlopsError",), 2),
    "RollbackNotFound": (("RollbackError",), 7),
    "RollbackDigestMismatch": (("RollbackError",), 5),
    "RollbackNotReady": (("RollbackError",), 1),
    "StaleRollback": (("RollbackError",), 1),
    "StaleDecision": (("MlopsError", "RuntimeError"), 1),
    "ProbeError": (("MlopsError",), 1),
    "MetricFault": (("RuntimeError",), None),
    "DetectionInputError": (("ValueError",), None),
}


def test_every_exception_of_the_room_is_defined_in_promotion_errors():
    elsewhere = []
    for info in pkgutil.walk_packages(promotion.__path__, "promotion."):
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if cls.__module__ == module.__name__ and issubclass(cls, BaseException) \
                    and module is not errors:
                elsewhere.append(f"{module.__name__}.{name}")
    assert elsewhere == [], "define these in promotion/errors.py"


def test_each_exception_keeps_its_bases_and_exit_code():
    found = {name: (tuple(b.__name__ for b in cls.__bases__), getattr(cls, "exit_code", None))
             for name, cls in inspect.getmembers(errors, inspect.isclass)
             if issubclass(cls, BaseException) and cls.__module__ == errors.__name__}
    assert found == EXPECTED
    assert sorted(errors.__all__) == sorted(EXPECTED)
