"""The fault drill a model version declares in `infer_cfg.yml` (`fault:`).

Both `infer_cfg.yml` formats the server reads (the example's, `serving.modeldir`,
and PaddleDetection's, `serving.ppdet_config`) accept the same section. The
server applies it per request with `FaultDrill`, inside the request timing and
counting, so a canary rollback can be rehearsed against the very metrics the
promotion controller reads.
"""

import asyncio
import random
from typing import Literal

import pydantic


class FaultConfig(pydantic.BaseModel):
    """A fault drill, in the spirit of Istio's HTTPFault (delay / abort with a percentage).

    Unknown keys are refused (unlike the other sections): a misspelt drill
    that silently does nothing would make a rehearsal pass for the wrong reason.
    """

    model_config = pydantic.ConfigDict(extra="forbid", allow_inf_nan=False)

    # strict: a number, not "200" or `true`; at most an hour (longer is a typo, not a drill)
    delay_ms: float = pydantic.Field(0.0, ge=0, le=3_600_000, strict=True)  # added to each request
    error_rate: float = pydantic.Field(0.0, ge=0, le=1, strict=True)  # share failed on purpose
    error_status: Literal[500, 503] = 500

    @property
    def active(self) -> bool:
        """True when the drill changes anything a caller sees."""
        return self.delay_ms > 0 or self.error_rate > 0

    def describe(self) -> str:
        """One line for logs and error bodies."""
        return (
            f"delay_ms={self.delay_ms:g} error_rate={self.error_rate:g} "
            f"error_status={self.error_status}"
        )


class FaultDrill:
    """The model's declared fault drill (`infer_cfg.yml` `fault:`), applied per request.

    Like a service mesh's HTTPFault, delay and abort come before the request
    is admitted: a delayed request holds no in-flight slot and no predictor
    (so a slow drill shows as latency, not as 503s from the in-flight limit)
    and an aborted one costs no inference. The delay is an `asyncio.sleep`,
    never a blocked thread. Which requests fail is drawn from a generator
    seeded with the model name and version: a rehearsal is reproducible, and
    over many requests the share of errors approaches `error_rate`.
    """

    def __init__(self, fault: FaultConfig | None, seed: str) -> None:
        self.config = fault if fault is not None and fault.active else None
        self.delay_seconds = self.config.delay_ms / 1000.0 if self.config else 0.0
        self.error_rate = self.config.error_rate if self.config else 0.0
        self.error_status = self.config.error_status if self.config else 500
        self._rng = random.Random(seed)  # touched only from the event loop

    @property
    def active(self) -> bool:
        return self.config is not None

    async def apply(self) -> int | None:
        """Wait the declared delay; return the status to answer with, or None to serve."""
        if self.delay_seconds > 0:
            await asyncio.sleep(self.delay_seconds)
        if self.error_rate > 0 and self._rng.random() < self.error_rate:
            return self.error_status
        return None

    def error_message(self) -> str:
        return (
            f"fault drill: injected error {self.error_status} (this model version declares "
            f"fault.error_rate={self.error_rate:g} in infer_cfg.yml)"
        )
