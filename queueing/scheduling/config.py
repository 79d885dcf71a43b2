"""Scheduler configuration, mirroring the relevant parts of Kueue's Configuration.

The controller reads it from a file and ``queueing simulate --config FILE`` accepts the same file:
``SchedulingConfig.from_dict(yaml.safe_load(text))``. Keys are Kueue's camelCase names::

    fairSharing:
      enable: true                      # default true (Kueue: false)
      preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
    admissionFairSharing:               # absent: off
      usageHalfLifeTime: 168h
      usageSamplingInterval: 5m
      resourceWeights: {gpu: 1, cpu: 0}
      cohortLevel: false                # also order ClusterQueues of a cohort by decayed usage
    waitForPodsReady:
      requeuingStrategy:
        backoffBaseSeconds: 60
        backoffMaxSeconds: 3600
        backoffLimitCount: null         # null: requeue forever

Durations are Go-style ("1h30m", "90s", "250ms") or numbers of seconds.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic.alias_generators import to_camel

__all__ = [
    "AdmissionFairSharingConfig",
    "ConfigError",
    "FairSharingConfig",
    "RequeuingStrategy",
    "SchedulingConfig",
    "WaitForPodsReady",
    "parse_duration",
]

PreemptionStrategy = Literal["LessThanOrEqualToFinalShare", "LessThanInitialShare"]

_DUR = re.compile(r"([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h)")  # ASCII digits only, as Go
# Go's time.Duration is int64 nanoseconds: ParseDuration refuses anything longer (about 292 years)
MAX_DURATION_SECONDS = (2**63 - 1) / 1e9
_UNIT = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigError(ValueError):
    """The configuration is invalid; the message names the field."""


def parse_duration(v: object) -> float:
    """Seconds from a Go duration text ("1h30m") or a number of seconds."""
    if isinstance(v, bool):
        raise ValueError(f"not a duration: {v!r}")
    if isinstance(v, int | float):
        if not v >= 0:  # also NaN
            raise ValueError(f"duration must not be negative: {v!r}")
        if v > MAX_DURATION_SECONDS:
            raise ValueError(f"duration too long: {v!r} (at most {MAX_DURATION_SECONDS:.0f} seconds)")
        return float(v)
    if not isinstance(v, str):
        raise ValueError(f"not a duration: {v!r}")
    s = v.strip()
    if s == "0":
        return 0.0
    pos = 0
    total = 0.0
    for m in _DUR.finditer(s):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT[m.group(2)]
        pos = m.end()
    if pos != len(s) or not s:
        raise ValueError(f'not a duration: {_short(v)} (use e.g. "90s", "5m", "1h30m")')
    if total > MAX_DURATION_SECONDS:
        raise ValueError(f"duration too long: {_short(v)} (at most about 292 years, as Go's time.Duration)")
    return total


def _short(v: str) -> str:
    return repr(v if len(v) <= 60 else v[:57] + "...")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class FairSharingConfig(_Model):
    enable: bool = True
    preemption_strategies: tuple[PreemptionStrategy, ...] = (
        "LessThanOrEqualToFinalShare",
        "LessThanInitialShare",
    )


class AdmissionFairSharingConfig(_Model):
    usage_half_life_time: float = 168 * 3600.0
    usage_sampling_interval: float = 300.0
    resource_weights: dict[str, float] = Field(default_factory=dict)
    cohort_level: bool = False

    @field_validator("usage_half_life_time", "usage_sampling_interval", mode="before")
    @classmethod
    def _dur(cls, v: object) -> float:
        return parse_duration(v)

    def weight(self, resource: str) -> float:
        return self.resource_weights.get(resource, 1.0)


class RequeuingStrategy(_Model):
    backoff_base_seconds: float = 60.0
    backoff_max_seconds: float = 3600.0
    backoff_limit_count: int | None = None

    @field_validator("backoff_limit_count")
    @classmethod
    def _nonneg(cls, v: int | None) -> int | None:
        if v is not None and v < 0:
            raise ValueError("must be >= 0")
        return v


class WaitForPodsReady(_Model):
    enable: bool = True
    timeout: float = 1800.0
    requeuing_strategy: RequeuingStrategy = Field(default_factory=RequeuingStrategy)

    @field_validator("timeout", mode="before")
    @classmethod
    def _dur(cls, v: object) -> float:
        return parse_duration(v)


class SchedulingConfig(_Model):
    fair_sharing: FairSharingConfig = Field(default_factory=FairSharingConfig)
    admission_fair_sharing: AdmissionFairSharingConfig | None = None
    wait_for_pods_ready: WaitForPodsReady = Field(default_factory=WaitForPodsReady)
    # safety valve for the eviction planner's search (candidate pairs examined per preemptor)
    max_preemption_pairs: int = 400
    # verify mode (``queueing.dra.verify``): the cycle's memos and caches (``CycleMemo``, ``PlanMemo``,
    # the Assigner's shapes) also run the general computation and raise ``VerifyError`` on a
    # difference; the shell sets it (``QUEUEING_VERIFY=1``), the core never reads the environment; the run shortcut of pending reasons is checked too
    verify: bool = False

    @classmethod
    def from_dict(cls, data: Any, source: str = "configuration") -> SchedulingConfig:
        """Validate a mapping (e.g. a parsed YAML file); errors name the field."""
        if data is None:
            return cls()
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: expected a mapping, got {type(data).__name__}")
        try:
            return cls.model_validate(data)
        except ValidationError as e:
            msgs = []
            for err in e.errors():
                loc = ".".join(str(x) for x in err["loc"])
                msgs.append(f"{source}: {loc}: {err['msg']}")
            raise ConfigError("; ".join(msgs)) from None
