"""The fault drill a model version declares in `infer_cfg.yml` (`fault:`).

Both `infer_cfg.yml` formats the server reads (the example's, `serving.modeldir`,
and PaddleDetection's, `serving.ppdet_config`) accept the same section.
"""

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
