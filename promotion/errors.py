"""What can go wrong in the promotion room, named after what the caller should do next.

Fix the input (exit 2, naming the file, field or flag): `SettingsError`, `PolicyError`,
`StateError`, `PresetError`, `SteeringError`, `ProductionError`, `ProposeError`, and
`RollbackError` with its kinds (`RollbackNotFound` exit 7, `RollbackDigestMismatch`
exit 5, `RollbackNotReady` and `StaleRollback` exit 1: try again). Decide again (exit 1):
`StaleDecision`, `main` moved under a canary decision. Caught by their callers and
turned into something else: `MetricFault` (the canary holds with cause `fault`),
`ProbeError` (the window is judged without the paired answers), `DetectionInputError`
(the evaluation step names the file). Each class's docstring says when it is raised.
"""

from __future__ import annotations

from contracts.errors import ExitCode, MlopsError

__all__ = [
    "DetectionInputError",
    "MetricFault",
    "PolicyError",
    "PresetError",
    "ProbeError",
    "ProductionError",
    "ProposeError",
    "RollbackDigestMismatch",
    "RollbackError",
    "RollbackNotFound",
    "RollbackNotReady",
    "SettingsError",
    "StaleDecision",
    "StaleRollback",
    "StateError",
    "SteeringError",
]


class SettingsError(MlopsError):
    """An option the controller cannot run with; the message names the flag."""

    exit_code = ExitCode.BAD_INPUT


class PolicyError(MlopsError, ValueError):
    """The canary policy is invalid; the message names the field."""

    exit_code = ExitCode.BAD_INPUT


class StateError(MlopsError, ValueError):
    """`promotion.yaml` cannot be read; the message names the field."""

    exit_code = ExitCode.BAD_INPUT


class PresetError(MlopsError, ValueError):
    """Unknown preset or a broken template; the message says which and why."""

    exit_code = ExitCode.BAD_INPUT


class SteeringError(MlopsError, ValueError):
    """A request to steer that names no known action."""

    exit_code = ExitCode.BAD_INPUT


class ProductionError(MlopsError):
    """The GitOps repo could not be read, so production is unknown (not absent)."""

    exit_code = ExitCode.BAD_INPUT


class ProposeError(MlopsError):
    """The candidate cannot be proposed; the message says why and what to do."""

    exit_code = ExitCode.BAD_INPUT


class RollbackError(MlopsError):
    """The rollback cannot be done as asked; the message says why and what to do."""

    exit_code = ExitCode.BAD_INPUT


class RollbackNotFound(RollbackError):
    """The model, the version, its Deployment in the history or its model files are gone."""

    exit_code = ExitCode.NOT_FOUND


class RollbackDigestMismatch(RollbackError):
    """The published weights are not the ones the version's Deployment was approved with."""

    exit_code = ExitCode.DIGEST_MISMATCH


class RollbackNotReady(RollbackError):
    """The version did not become ready in time, or cannot: the traffic did not move."""

    exit_code = ExitCode.FAILED


class StaleRollback(RollbackError):
    """The branch moved between reading it and committing: plan again."""

    exit_code = ExitCode.FAILED


class StaleDecision(MlopsError, RuntimeError):
    """`main` moved under the decision (its base state changed): decide again."""

    exit_code = ExitCode.FAILED


class MetricFault(RuntimeError):
    """The metric source could not answer (as opposed to answering "no data")."""


class ProbeError(MlopsError):
    """The probe could not be made (no probe set shipped, a version unreachable).
    `lasting`: asking again in this step will not help (a 404: no probe set, no such
    version behind the router)."""

    def __init__(self, message: str, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting


class DetectionInputError(ValueError):
    """Ground truth or detections are unusable; the message says which item."""
