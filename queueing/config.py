"""The controller's configuration: a YAML file plus environment variables, validated at start.

``load_config(path, env)`` reads the file (Kueue's camelCase field names where Kueue has the concept),
overlays environment variables (prefix ``QUEUEING_``, nested delimiter ``__``, snake_case names, e.g.
``QUEUEING_WAIT_FOR_PODS_READY__TIMEOUT=10m``; values of lists and maps are JSON) and validates the
result. Environment variables win over the file, the file wins over the defaults. Any problem raises
:class:`ConfigError` whose message names the field (and the file or environment variable it came from).

The database URL is secret: it comes from ``QUEUEING_DATABASE_URL`` or from a file named by
``databaseURLFile`` (a mounted Secret), and falls back to an embedded SQLite database.

The scheduling sections (``fairSharing``, ``admissionFairSharing``, ``waitForPodsReady``) are the
scheduling core's own models (:mod:`queueing.scheduling.config`), embedded here; ``Config.scheduling()``
hands them to the cycle. ``render_reference()`` produces ``docs/configuration.md`` from this module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict
from pydantic_settings.sources import EnvSettingsSource
from pydantic_settings.sources.utils import parse_env_vars

from queueing.scheduling.config import (
    AdmissionFairSharingConfig,
    ConfigError,
    FairSharingConfig,
    RequeuingStrategy,
    SchedulingConfig,
    WaitForPodsReady,
    parse_duration,
)

__all__ = [
    "DEFAULT_DATABASE_URL",
    "ENV_CONFIG_FILE",
    "ENV_PREFIX",
    "Config",
    "ConfigError",
    "HealthConfig",
    "LeaderElectionConfig",
    "LedgerConfig",
    "MetricsConfig",
    "format_duration",
    "load_config",
    "render_reference",
]

ENV_PREFIX = "QUEUEING_"
ENV_NESTED = "__"
ENV_CONFIG_FILE = "QUEUEING_CONFIG"  # the file path when load_config gets none
DEFAULT_DATABASE_URL = "sqlite+aiosqlite:///queueing.db"
DATABASE_SCHEMES = ("postgresql+asyncpg", "postgresql", "sqlite+aiosqlite", "sqlite")
LOG_LEVELS = ("debug", "info", "warning", "error")


def format_duration(seconds: float) -> str:
    """Go-style text for a number of seconds: 90 -> "1m30s", 604800 -> "168h", 0.25 -> "250ms"."""
    if seconds == 0:
        return "0s"
    if seconds < 1:
        return f"{round(seconds * 1000, 3):g}ms"
    whole = int(seconds)
    frac = seconds - whole
    h, rest = divmod(whole, 3600)
    m, s = divmod(rest, 60)
    out = ""
    if h:
        out += f"{h}h"
    if m:
        out += f"{m}m"
    if s or frac:
        out += f"{s + frac:g}s"
    return out


def _duration(description: str, **kw: Any) -> Any:
    """A Field holding a duration in seconds; the reference shows it Go-style."""
    return Field(description=description, json_schema_extra={"duration": True}, **kw)


def _bind_address(v: str) -> str:
    host, sep, port = v.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f'{v!r} is not HOST:PORT or :PORT (e.g. ":8080")')
    if host.startswith("[") != host.endswith("]"):
        raise ValueError(f"{v!r}: unbalanced brackets around an IPv6 host")
    return v


class _Section(BaseModel):
    """A nested section: camelCase in the file, snake_case from the environment; no unknown keys."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True, alias_generator=to_camel, frozen=True)


class LeaderElectionConfig(_Section):
    """Kueue's ``leaderElection`` (component-base LeaderElectionConfiguration), with a Lease."""

    leader_elect: bool = Field(
        True,
        description="Run leader election: only the holder of the Lease admits and evicts; the other "
        "replicas keep their caches warm and take over when the Lease expires. Turn off only with one replica.",
    )
    resource_name: str = Field(
        "queueing-controller", description="Name of the coordination.k8s.io Lease.", min_length=1
    )
    resource_namespace: str | None = Field(
        None, description="Namespace of the Lease; empty means the controller's `namespace`."
    )
    lease_duration: float = _duration(
        "How long a Lease is valid after its last renewal; a standby takes over at most this long after the leader stops renewing.",
        default=15.0,
    )
    renew_deadline: float = _duration(
        "How long the leader keeps trying to renew before it steps down; less than `leaseDuration`.",
        default=10.0,
    )
    retry_period: float = _duration(
        "Interval between attempts to acquire or renew the Lease; less than `renewDeadline`.", default=2.0
    )

    @field_validator("lease_duration", "renew_deadline", "retry_period", mode="before")
    @classmethod
    def _dur(cls, v: object) -> float:
        seconds = parse_duration(v)
        if seconds <= 0:
            raise ValueError("must be greater than zero")
        return seconds

    @model_validator(mode="after")
    def _ordering(self) -> LeaderElectionConfig:
        # client-go's rules: leaseDuration > renewDeadline > retryPeriod x 1.2 (its jitter factor)
        if self.renew_deadline >= self.lease_duration:
            raise ValueError(
                f"renewDeadline ({format_duration(self.renew_deadline)}) must be less than "
                f"leaseDuration ({format_duration(self.lease_duration)})"
            )
        if self.retry_period * 1.2 >= self.renew_deadline:
            raise ValueError(
                f"retryPeriod ({format_duration(self.retry_period)}) x 1.2 must be less than "
                f"renewDeadline ({format_duration(self.renew_deadline)})"
            )
        return self


class MetricsConfig(_Section):
    """Kueue's ``metrics``."""

    bind_address: str = Field(
        ":8080", description="Where `/metrics` (Prometheus text format) is served, `HOST:PORT` or `:PORT`."
    )

    @field_validator("bind_address")
    @classmethod
    def _addr(cls, v: str) -> str:
        return _bind_address(v)


class HealthConfig(_Section):
    """Kueue's ``health``."""

    health_probe_bind_address: str = Field(
        ":8081", description="Where `/healthz` (liveness) and `/readyz` (readiness) are served."
    )

    @field_validator("health_probe_bind_address")
    @classmethod
    def _addr(cls, v: str) -> str:
        return _bind_address(v)


class VisibilityConfig(_Section):
    """The visibility API ``visibility.queueing.dra.io/v1beta1`` (Kueue's visibility server)."""

    bind_address: str | None = Field(
        None,
        description="Where the visibility API (pending workloads with their positions) is served, for the "
        "API server's aggregation layer (the `APIService` in `deploy/`, which sets `:8082`); port 0: any "
        "free port; absent: not served.",
    )
    cert_file: str | None = Field(
        None,
        description="TLS certificate (PEM) to serve it over HTTPS, as kube-aggregator requires; without it "
        "plain HTTP (tests, `queueing dev`).",
    )
    key_file: str | None = Field(None, description="The certificate's private key (PEM).")

    @field_validator("bind_address")
    @classmethod
    def _addr(cls, v: str | None) -> str | None:
        if v is None:
            return None
        host, sep, port = v.rpartition(":")
        if sep and port == "0":  # any free port (tests, `queueing dev`): the server says which
            _bind_address(f"{host}:1")
            return v
        return _bind_address(v)


class LedgerConfig(_Section):
    """The ledger's periodic compaction (no Kueue equivalent)."""

    retention: float = _duration(
        "Usage journal rows older than this are folded into daily rollups (reports give the same totals "
        "before and after); at least 24h.",
        default=30 * 86400.0,
    )
    compaction_interval: float = _duration("How often compaction runs.", default=6 * 3600.0)

    @field_validator("retention", "compaction_interval", mode="before")
    @classmethod
    def _dur(cls, v: object) -> float:
        return parse_duration(v)

    @field_validator("retention")
    @classmethod
    def _min_retention(cls, v: float) -> float:
        if v < 86400:
            raise ValueError(f"must be at least 24h, got {format_duration(v)}")
        return v

    @field_validator("compaction_interval")
    @classmethod
    def _positive(cls, v: float) -> float:
        if v < 60:
            raise ValueError(f"must be at least 1m, got {format_duration(v)}")
        return v


class Config(BaseSettings):
    """The whole configuration. Build it with :func:`load_config`; ``Config()`` is all defaults."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter=ENV_NESTED,
        case_sensitive=False,
        extra="forbid",
        frozen=True,
    )

    namespace: str = Field(
        "queueing-system",
        description="The controller's own namespace (Events about itself, the default Lease namespace). "
        "The deployment sets it from the pod's namespace.",
        min_length=1,
    )
    database_url: SecretStr | None = Field(
        None,
        description="The ledger's database URL (`postgresql+asyncpg://USER:PASSWORD@HOST:5432/DB` or "
        "`sqlite+aiosqlite:///FILE`). Prefer `QUEUEING_DATABASE_URL` or `databaseURLFile` over writing a "
        "password into the file. Wins over `databaseURLFile`.",
    )
    database_url_file: str | None = Field(
        None,
        description="A file whose content is the database URL, e.g. a mounted Secret key "
        "(`/etc/queueing/database/url`). Read at start; surrounding whitespace is ignored.",
    )
    plan_binding_mode: Literal["Auto", "Full", "NodeOnly"] = Field(
        "Auto",
        description="How an admission's plan is bound. `Full`: the controller gives every pod its planned "
        "node and writes the planned devices into its ResourceClaims' `status.allocation`; kube-scheduler "
        "only confirms. `NodeOnly`: the controller pins the node, kube-scheduler's DRA plugin allocates "
        "the devices. `Auto`: `NodeOnly` for a single pod whose planned devices are exactly what "
        "kube-scheduler's allocator picks on the planned node (2 API writes fewer per Job), `Full` for "
        "everything else (gangs, shared claims, other picks).",
    )
    leader_election: LeaderElectionConfig = Field(
        default_factory=LeaderElectionConfig, description="Leader election with a Lease."
    )
    wait_for_pods_ready: WaitForPodsReady = Field(
        default_factory=WaitForPodsReady,
        description="Evict and requeue an admitted workload whose pods are not all Ready in time.",
    )
    fair_sharing: FairSharingConfig = Field(
        default_factory=FairSharingConfig, description="Fair sharing of unused quota in cohorts."
    )
    admission_fair_sharing: AdmissionFairSharingConfig | None = Field(
        None,
        description="Order the workloads of a ClusterQueue by their LocalQueue's decayed past usage. "
        "Absent: off.",
    )
    metrics: MetricsConfig = Field(default_factory=MetricsConfig, description="The metrics endpoint.")
    health: HealthConfig = Field(default_factory=HealthConfig, description="The probe endpoints.")
    ledger: LedgerConfig = Field(default_factory=LedgerConfig, description="Ledger compaction.")
    visibility: VisibilityConfig = Field(
        default_factory=VisibilityConfig, description="The visibility API (pending workloads)."
    )
    accept_kueue_labels: bool = Field(
        False,
        description="Also queue Jobs labelled `kueue.x-k8s.io/queue-name` (and take their priority from "
        "`kueue.x-k8s.io/priority-class`), for clusters moving over from Kueue; `queueing.dra.io/...` "
        "labels win where a Job has both. Turn it on only once Kueue no longer manages those Jobs.",
    )
    resync_period: float = _duration(
        "Interval of the full re-sync: re-list every watched kind and reconcile the ledger with the cluster.",
        default=600.0,
    )
    eviction_timeout: float = _duration(
        "How long an evicted workload's pods and claims may take to go away. Past it the victim no longer "
        "counts as freeing its devices: the preemptor's plan is recomputed (the victim is still drained).",
        default=300.0,
    )
    node_only_confirm_timeout: float = _duration(
        "How long devices released on a node stay held (not plannable) while an admission bound node only "
        "on that node waits for kube-scheduler to allocate its claims: kube-scheduler could give it a "
        "released device instead of its planned one. Past it the devices are plannable again.",
        default=60.0,
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # load_config merges the file and the given environment itself; Config(...) never reads
        # os.environ behind the caller's back.
        return (init_settings,)

    @field_validator("resync_period", mode="before")
    @classmethod
    def _dur(cls, v: object) -> float:
        seconds = parse_duration(v)
        if seconds < 10:
            raise ValueError(f"must be at least 10s, got {format_duration(seconds)}")
        return seconds

    @field_validator("eviction_timeout", "node_only_confirm_timeout", mode="before")
    @classmethod
    def _positive_duration(cls, v: object) -> float:
        seconds = parse_duration(v)
        if seconds <= 0:
            raise ValueError(f"must be positive, got {format_duration(seconds)}")
        return seconds

    @field_validator("log_level", mode="before")
    @classmethod
    def _lower(cls, v: object) -> object:
        return v.lower() if isinstance(v, str) else v

    @field_validator("database_url")
    @classmethod
    def _url(cls, v: SecretStr | None) -> SecretStr | None:
        if v is not None:
            _check_database_url(v.get_secret_value())
        return v

    @model_validator(mode="after")
    def _wait_for_pods_ready(self) -> Config:
        w = self.wait_for_pods_ready
        if w.enable and w.timeout <= 0:
            raise ValueError("waitForPodsReady.timeout must be greater than zero when enabled")
        rs = w.requeuing_strategy
        if rs.backoff_base_seconds <= 0:
            raise ValueError(
                "waitForPodsReady.requeuingStrategy.backoffBaseSeconds must be greater than zero"
            )
        if rs.backoff_max_seconds < rs.backoff_base_seconds:
            raise ValueError(
                "waitForPodsReady.requeuingStrategy.backoffMaxSeconds must be at least backoffBaseSeconds"
            )
        a = self.admission_fair_sharing
        if a is not None:
            if a.usage_half_life_time <= 0:
                raise ValueError("admissionFairSharing.usageHalfLifeTime must be greater than zero")
            if a.usage_sampling_interval <= 0:
                raise ValueError("admissionFairSharing.usageSamplingInterval must be greater than zero")
            bad = [k for k, w8 in a.resource_weights.items() if w8 < 0]
            if bad:
                raise ValueError(f"admissionFairSharing.resourceWeights[{bad[0]}] must not be negative")
        return self

    # --- derived values the controller uses -------------------------------------------------------

    @property
    def lease_namespace(self) -> str:
        return self.leader_election.resource_namespace or self.namespace

    def resolved_database_url(self) -> str:
        """``databaseURL``, else the content of ``databaseURLFile``, else the SQLite default."""
        if self.database_url is not None:
            return self.database_url.get_secret_value()
        if self.database_url_file is not None:
            return _read_database_url_file(self.database_url_file)
        return DEFAULT_DATABASE_URL

    def scheduling(self) -> SchedulingConfig:
        """The scheduling core's view of this configuration."""
        return SchedulingConfig(
            fair_sharing=self.fair_sharing,
            admission_fair_sharing=self.admission_fair_sharing,
            wait_for_pods_ready=self.wait_for_pods_ready,
        )


def _check_database_url(url: str) -> None:
    scheme, sep, _ = url.partition("://")
    if not sep or scheme not in DATABASE_SCHEMES:
        shown = scheme if sep else "(none)"
        raise ValueError(
            f"unsupported URL scheme {shown!r}: use postgresql+asyncpg://USER:PASSWORD@HOST:5432/DB "
            "or sqlite+aiosqlite:///FILE"
        )


def _read_database_url_file(path: str) -> str:
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except OSError as e:
        raise ConfigError(f"databaseURLFile: cannot read {path}: {e.strerror or e}") from None
    if not text:
        raise ConfigError(f"databaseURLFile: {path} is empty")
    try:
        _check_database_url(text)
    except ValueError as e:
        raise ConfigError(f"databaseURLFile: {path}: {e}") from None
    return text


# --- loading ------------------------------------------------------------------------------------


class _MappingEnvSource(EnvSettingsSource):
    """pydantic-settings' environment source over a given mapping instead of ``os.environ``."""

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        self._given = dict(env)
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(
            self._given, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str
        )


def _model_of(annotation: Any) -> type[BaseModel] | None:
    """The BaseModel class inside ``X`` or ``X | None``."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) is not None:
        for arg in get_args(annotation):
            if isinstance(arg, type) and issubclass(arg, BaseModel):
                return arg
    return None


def _file_key(model: type[BaseModel], name: str) -> str:
    """The camelCase key of a field in the file (Kueue's name)."""
    info = model.model_fields[name]
    if info.alias:
        return info.alias
    return _TOP_LEVEL_KEYS.get(name, to_camel(name))


# top-level names that are not plain camelCase of the attribute
_TOP_LEVEL_KEYS = {"database_url": "databaseURL", "database_url_file": "databaseURLFile"}


def _normalize(model: type[BaseModel], data: Any, where: str) -> Any:
    """Rename the file's camelCase keys to attribute names, recursively through sections.

    Unknown keys are kept (validation rejects them with their name); maps such as ``resourceWeights``
    are left as they are.
    """
    if not isinstance(data, dict):
        return data
    by_key = {_file_key(model, n): n for n in model.model_fields}
    out: dict[str, Any] = {}
    for key, value in data.items():
        if not isinstance(key, str):
            raise ConfigError(f"{where}: key {key!r} is not a string")
        name = by_key.get(key, key)
        if name in out:
            raise ConfigError(f"{where}: {key} is given twice (as {_file_key(model, name)} and {name})")
        sub = _model_of(model.model_fields[name].annotation) if name in model.model_fields else None
        out[name] = _normalize(sub, value, where) if sub is not None else value
    return out


def _leaf_paths(data: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    if isinstance(data, dict) and data:
        for k, v in data.items():
            yield from _leaf_paths(v, (*prefix, str(k)))
    else:
        yield prefix


def _display_path(loc: tuple[int | str, ...]) -> str:
    """``('wait_for_pods_ready', 'requeuing_strategy', 'backoff_limit_count')`` -> the file's names."""
    model: type[BaseModel] | None = Config
    parts: list[str] = []
    for item in loc:
        if isinstance(item, int):
            parts[-1:] = [f"{parts[-1]}[{item}]"] if parts else [f"[{item}]"]
            continue
        if model is not None:
            name = next(
                (n for n in model.model_fields if item == n or item == _file_key(model, n)),
                None,
            )
            if name is not None:
                parts.append(_file_key(model, name))
                model = _model_of(model.model_fields[name].annotation)
                continue
            model = None
        parts.append(item)
    return ".".join(parts)


def _env_name(path: tuple[str, ...]) -> str:
    return ENV_PREFIX + ENV_NESTED.join(p.upper() for p in path)


def load_config(path: str | None, env: Mapping[str, str]) -> Config:
    """Read the file at ``path`` (or ``$QUEUEING_CONFIG``; none: defaults), overlay ``env``, validate.

    Raises :class:`ConfigError` naming the field, and where its value came from, on any problem.
    The database URL file, if configured, is read here too, so a missing Secret fails at start.
    """
    if path is None:
        path = env.get(ENV_CONFIG_FILE) or None
    file_data: dict[str, Any] = {}
    where = "defaults"
    if path is not None:
        where = path
        try:
            text = Path(path).read_text(encoding="utf-8")
        except OSError as e:
            raise ConfigError(f"configuration file {path}: {e.strerror or e}") from None
        try:
            loaded = yaml.safe_load(text)
        except yaml.YAMLError as e:
            raise ConfigError(f"configuration file {path}: not valid YAML: {e}") from None
        if loaded is None:
            loaded = {}
        if not isinstance(loaded, dict):
            raise ConfigError(
                f"configuration file {path}: expected a mapping of fields, got {type(loaded).__name__}"
            )
        file_data = _normalize(Config, loaded, f"configuration file {path}")

    try:
        env_data = _MappingEnvSource(Config, env)()
    except Exception as e:  # pydantic-settings' SettingsError on a malformed JSON value
        raise ConfigError(f"environment: {e}") from None
    env_paths = {p for p in _leaf_paths(env_data) if p}

    merged = _deep_merge(file_data, env_data)
    try:
        config = Config(**merged)
    except ValidationError as e:
        raise ConfigError(_explain(e, where, env_paths)) from None
    if config.database_url is None and config.database_url_file is not None:
        config.resolved_database_url()  # fail now, naming the file, rather than at first use
    return config


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), dict):
            out[k] = _deep_merge(out[k], v)
        else:
            out[k] = v
    return out


def _explain(e: ValidationError, where: str, env_paths: set[tuple[str, ...]]) -> str:
    msgs: list[str] = []
    for err in e.errors():
        loc = tuple(err["loc"])
        field = _display_path(loc) if loc else ""
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field (check the spelling; see docs/configuration.md)"
        strs = tuple(str(x) for x in loc)
        # the env variables that set this field, a section containing it, or a field inside it
        names = [_env_name(p) for p in sorted(env_paths) if strs[: len(p)] == p or p[: len(strs)] == strs]
        source = None
        if names:
            source = ("environment variable " if len(names) == 1 else "environment variables ") + ", ".join(
                names
            )
            if where != "defaults" and all(len(p) > len(strs) for p in env_paths if p[: len(strs)] == strs):
                source += f" and configuration file {where}"
        if source is None:
            source = f"configuration file {where}" if where != "defaults" else "defaults"
        if field:
            msgs.append(f"{field}: {msg} (from {source})")
        else:
            msgs.append(f"{msg} (from {source})")
    return "invalid configuration: " + "; ".join(msgs)


# --- the reference --------------------------------------------------------------------------------

# descriptions for the scheduling core's fields (its models carry none); a test checks every leaf has one
_EXTRA_DOCS: dict[tuple[type[BaseModel], str], str] = {
    (
        WaitForPodsReady,
        "enable",
    ): "Evict workloads whose pods are not all Ready within `timeout` after admission "
    "(also when a planned node disappears or a device gets a NoExecute taint).",
    (WaitForPodsReady, "timeout"): "How long the pods of an admitted workload may take to become Ready.",
    (WaitForPodsReady, "requeuing_strategy"): "Backoff before a workload evicted for `PodsReadyTimeout` "
    "is queued again (every other eviction, e.g. a preemption, requeues at once).",
    (RequeuingStrategy, "backoff_base_seconds"): "First requeue delay in seconds after a `PodsReadyTimeout` "
    "eviction; it doubles with every further `PodsReadyTimeout` eviction, as in Kueue.",
    (RequeuingStrategy, "backoff_max_seconds"): "Upper bound of the requeue delay in seconds.",
    (RequeuingStrategy, "backoff_limit_count"): "`PodsReadyTimeout` evictions after which the workload "
    "is deactivated (`spec.active: false`); `null` requeues forever.",
    (FairSharingConfig, "enable"): "Share unused cohort quota by weighted share (ClusterQueue "
    "`fairSharing.weight`) and preempt by share when reclaiming.",
    (FairSharingConfig, "preemption_strategies"): "Which preemptions fair sharing allows, tried in order: "
    "`LessThanOrEqualToFinalShare` (the preemptor's share after admission is at most the victim's after "
    "eviction), `LessThanInitialShare` (the preemptor's share after admission is below the victim's now).",
    (
        AdmissionFairSharingConfig,
        "usage_half_life_time",
    ): "Half-life of the decay of a LocalQueue's past usage.",
    (AdmissionFairSharingConfig, "usage_sampling_interval"): "How often usage is sampled and decayed.",
    (AdmissionFairSharingConfig, "resource_weights"): "Weight of each resource in the usage sum "
    "(resource name to number); resources not listed weigh 1.",
    (AdmissionFairSharingConfig, "cohort_level"): "Also order the ClusterQueues of a cohort by decayed usage "
    "(not in Kueue).",
}
# the scheduling core's duration fields (stored as seconds)
_EXTRA_DURATIONS = {
    (WaitForPodsReady, "timeout"),
    (AdmissionFairSharingConfig, "usage_half_life_time"),
    (AdmissionFairSharingConfig, "usage_sampling_interval"),
}
# fields the configuration does not expose (scheduling-only knobs)
_EXAMPLE = """\
namespace: queueing-system
databaseURLFile: /etc/queueing/database/url
planBindingMode: Auto
leaderElection:
  leaderElect: true
  resourceName: queueing-controller
  leaseDuration: 15s
  renewDeadline: 10s
  retryPeriod: 2s
waitForPodsReady:
  enable: true
  timeout: 30m
  requeuingStrategy:
    backoffBaseSeconds: 60
    backoffMaxSeconds: 3600
    backoffLimitCount: 5
fairSharing:
  enable: true
  preemptionStrategies: [LessThanOrEqualToFinalShare, LessThanInitialShare]
admissionFairSharing:
  usageHalfLifeTime: 168h
  usageSamplingInterval: 5m
  resourceWeights:
    gpu.nvidia.com: 1
    cpu: 0
metrics:
  bindAddress: ":8080"
health:
  healthProbeBindAddress: ":8081"
ledger:
  retention: 720h
  compactionInterval: 6h
resyncPeriod: 10m
logLevel: info
"""


def example_config() -> str:
    """The annotated example in the reference (a test loads it)."""
    return _EXAMPLE


def _description(model: type[BaseModel], name: str) -> str:
    info = model.model_fields[name]
    return info.description or _EXTRA_DOCS.get((model, name), "")


def _is_duration(model: type[BaseModel], name: str) -> bool:
    extra = model.model_fields[name].json_schema_extra
    return (isinstance(extra, dict) and bool(extra.get("duration"))) or (model, name) in _EXTRA_DURATIONS


def _type_text(model: type[BaseModel], name: str) -> str:
    if _is_duration(model, name):
        return "duration"
    ann = model.model_fields[name].annotation
    origin = get_origin(ann)
    args = [a for a in get_args(ann) if a is not type(None)]
    if origin is Literal:
        return " \\| ".join(f"`{a}`" for a in get_args(ann))
    if ann is bool:
        return "bool"
    if ann is str or args == [str]:
        return "string"
    if ann in (int, float) or args in ([int], [float]):
        return "integer" if int in (ann, *args) else "number"
    if ann is SecretStr or args == [SecretStr]:
        return "string (secret)"
    if origin is tuple:
        inner = get_args(ann)[0]
        if get_origin(inner) is Literal:
            return "list of " + " \\| ".join(f"`{a}`" for a in get_args(inner))
        return "list"
    if origin is dict:
        return "map of string to number"
    if _model_of(ann) is not None:
        return "section"
    return str(ann)


def _default_text(model: type[BaseModel], name: str) -> str:
    info = model.model_fields[name]
    if info.default_factory is not None:
        value: Any = info.default_factory()  # type: ignore[call-arg]
    else:
        value = info.default
    if isinstance(value, BaseModel):
        return "–"
    if value is None:
        if name == "database_url" and model is Config:
            return f"– (`{DEFAULT_DATABASE_URL}` when neither is set)"
        return "null"
    if _is_duration(model, name):
        return f"`{format_duration(float(value))}`"
    if isinstance(value, tuple | list):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, dict):
        return "`{}`"
    if isinstance(value, float) and value.is_integer():
        return f"`{int(value)}`"
    return f"`{json.dumps(value) if isinstance(value, str) and value.startswith(':') else value}`"


def _rows(model: type[BaseModel], prefix: tuple[str, ...], env_prefix: tuple[str, ...]) -> Iterator[str]:
    for name in model.model_fields:
        key = _file_key(model, name)
        path = ".".join((*prefix, key))
        env = _env_name((*env_prefix, name))
        sub = _model_of(model.model_fields[name].annotation)
        desc = _description(model, name).replace("\n", " ")
        yield f"| `{path}` | {_type_text(model, name)} | {_default_text(model, name)} | `{env}` | {desc} |"
        if sub is not None:
            yield from _rows(sub, (*prefix, key), (*env_prefix, name))


def reference_fields() -> list[tuple[str, str]]:
    """(file path, description) of every field, sections included, in reference order."""
    out: list[tuple[str, str]] = []

    def walk(model: type[BaseModel], prefix: tuple[str, ...]) -> None:
        for name in model.model_fields:
            key = _file_key(model, name)
            out.append((".".join((*prefix, key)), _description(model, name)))
            sub = _model_of(model.model_fields[name].annotation)
            if sub is not None:
                walk(sub, (*prefix, key))

    walk(Config, ())
    return out


def _sample_error() -> str:
    try:
        Config(leader_election={"renew_deadline": 20})
    except ValidationError as e:
        return _explain(e, "/etc/queueing/config.yaml", set())
    raise AssertionError("the sample configuration error did not occur")


def render_reference() -> str:
    """docs/configuration.md, generated from the models above (a test keeps the committed file equal)."""
    lines = [
        "<!-- Generated by queueing.config.render_reference(); do not edit by hand. -->",
        "# Configuration reference",
        "",
        "`queueing run --config FILE` reads a YAML file (in the deployment: the ConfigMap",
        "`queueing-config`, mounted at `/etc/queueing/config.yaml`). Without `--config`, the file named by",
        f"`{ENV_CONFIG_FILE}` is read, if set. Field names follow Kueue's `Configuration` where Kueue has",
        "the concept (`waitForPodsReady`, `fairSharing`, `admissionFairSharing`, `leaderElection`,",
        "`metrics.bindAddress`, `health.healthProbeBindAddress`, `namespace`).",
        "",
        "Every field can also be set by an environment variable: prefix `QUEUEING_`, the snake_case",
        "field names joined by `__` (e.g. `QUEUEING_WAIT_FOR_PODS_READY__TIMEOUT=10m`). Lists and maps",
        "are JSON (`QUEUEING_FAIR_SHARING__PREEMPTION_STRATEGIES='[\"LessThanInitialShare\"]'`).",
        "**Precedence:** environment variable > file > default. Unknown fields are errors.",
        "",
        "Durations are Go-style text (`90s`, `5m`, `1h30m`, `250ms`) or a number of seconds.",
        "",
        "The configuration is checked at start; a bad value stops the controller with a message naming",
        "the field and where the value came from, e.g.",
        "",
        "```text",
        _sample_error(),
        "```",
        "",
        "## Database URL",
        "",
        "The ledger's URL is a secret. In order: `databaseURL` (normally from `QUEUEING_DATABASE_URL`),",
        "else the content of the file `databaseURLFile` (the deployment mounts the Secret",
        f"`queueing-database`, key `url`, there), else `{DEFAULT_DATABASE_URL}` (one replica only).",
        "`postgresql://` and `sqlite://` are accepted and use the asyncpg and aiosqlite drivers.",
        "",
        "## Fields",
        "",
        "| field | type | default | environment variable | meaning |",
        "|---|---|---|---|---|",
        *_rows(Config, (), ()),
        "",
        "## Example",
        "",
        "```yaml",
        *_EXAMPLE.rstrip("\n").split("\n"),
        "```",
        "",
    ]
    return "\n".join(lines)
