"""The controller configuration: defaults, file + environment precedence, clear errors, the reference doc."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from queueing.config import (
    DEFAULT_DATABASE_URL,
    Config,
    ConfigError,
    example_config,
    format_duration,
    load_config,
    reference_fields,
    render_reference,
)
from queueing.scheduling.config import ConfigError as SchedulingConfigError
from queueing.scheduling.config import SchedulingConfig

ROOT = Path(__file__).resolve().parents[2]


def write(tmp_path: Path, text: str, name: str = "config.yaml") -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_defaults_without_file_or_environment() -> None:
    c = load_config(None, {})
    assert c == Config()
    assert c.namespace == "queueing-system"
    assert c.resolved_database_url() == DEFAULT_DATABASE_URL == "sqlite+aiosqlite:///queueing.db"
    assert c.plan_binding_mode == "Auto"
    le = c.leader_election
    # controller-runtime's defaults, which Kueue inherits
    assert (le.leader_elect, le.lease_duration, le.renew_deadline, le.retry_period) == (True, 15.0, 10.0, 2.0)
    assert c.lease_namespace == "queueing-system"
    assert c.metrics.bind_address == ":8080"
    assert c.health.health_probe_bind_address == ":8081"
    assert c.ledger.retention == 30 * 86400
    assert c.resync_period == 600
    assert c.eviction_timeout == 300
    assert c.admission_fair_sharing is None
    # the scheduling sections are the scheduling core's own defaults
    assert c.scheduling() == SchedulingConfig()


def test_config_error_is_the_scheduling_cores_class() -> None:
    assert ConfigError is SchedulingConfigError


def test_os_environ_is_not_read_behind_the_callers_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("QUEUEING_NAMESPACE", "from-os-environ")
    assert load_config(None, {}).namespace == "queueing-system"
    assert Config().namespace == "queueing-system"


def test_file_uses_kueue_names_and_go_durations(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
namespace: kueue-like
planBindingMode: NodeOnly
leaderElection:
  resourceName: my-lease
  resourceNamespace: leases
  leaseDuration: 1m
  renewDeadline: 40s
  retryPeriod: 5s
waitForPodsReady:
  timeout: 1h30m
  requeuingStrategy: {backoffBaseSeconds: 10, backoffMaxSeconds: 600, backoffLimitCount: 3}
fairSharing:
  preemptionStrategies: [LessThanInitialShare]
admissionFairSharing:
  usageHalfLifeTime: 24h
  resourceWeights: {gpu.nvidia.com: 2, cpu: 0}
ledger: {retention: 168h, compactionInterval: 30m}
resyncPeriod: 90s
logLevel: DEBUG
""",
    )
    c = load_config(path, {})
    assert c.namespace == "kueue-like"
    assert c.plan_binding_mode == "NodeOnly"
    assert c.lease_namespace == "leases"
    assert (c.leader_election.lease_duration, c.leader_election.renew_deadline) == (60.0, 40.0)
    assert c.wait_for_pods_ready.timeout == 5400.0
    assert c.wait_for_pods_ready.requeuing_strategy.backoff_limit_count == 3
    assert c.fair_sharing.preemption_strategies == ("LessThanInitialShare",)
    afs = c.admission_fair_sharing
    assert afs is not None and afs.usage_half_life_time == 86400.0
    assert afs.resource_weights == {"gpu.nvidia.com": 2.0, "cpu": 0.0}  # map keys are not renamed
    assert afs.usage_sampling_interval == 300.0  # default inside a given section
    assert (c.ledger.retention, c.ledger.compaction_interval) == (7 * 86400.0, 1800.0)
    assert c.resync_period == 90.0
    assert c.log_level == "debug"
    assert c.scheduling().wait_for_pods_ready.timeout == 5400.0


def test_environment_overrides_file_field_by_field(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "namespace: from-file\nwaitForPodsReady:\n  timeout: 10m\n  requeuingStrategy:\n    backoffBaseSeconds: 30\n",
    )
    env = {
        "QUEUEING_WAIT_FOR_PODS_READY__REQUEUING_STRATEGY__BACKOFF_LIMIT_COUNT": "4",
        "queueing_namespace": "from-env",  # names are case-insensitive
        "QUEUEING_FAIR_SHARING__PREEMPTION_STRATEGIES": '["LessThanInitialShare"]',
        "QUEUEING_ADMISSION_FAIR_SHARING__RESOURCE_WEIGHTS": '{"gpu.nvidia.com": 3}',
        "QUEUEING_PLAN_BINDING_MODE": "NodeOnly",
        "UNRELATED": "x",
    }
    c = load_config(path, env)
    assert c.namespace == "from-env"
    rs = c.wait_for_pods_ready.requeuing_strategy
    # the file's sibling values survive the environment's override of one nested field
    assert (c.wait_for_pods_ready.timeout, rs.backoff_base_seconds, rs.backoff_limit_count) == (
        600.0,
        30.0,
        4,
    )
    assert c.fair_sharing.preemption_strategies == ("LessThanInitialShare",)
    assert c.admission_fair_sharing is not None
    assert c.admission_fair_sharing.resource_weights == {"gpu.nvidia.com": 3.0}
    assert c.plan_binding_mode == "NodeOnly"


def test_config_file_path_from_environment(tmp_path: Path) -> None:
    path = write(tmp_path, "namespace: via-env-path\n")
    assert load_config(None, {"QUEUEING_CONFIG": path}).namespace == "via-env-path"
    # an explicit path wins
    other = write(tmp_path, "namespace: explicit\n", "other.yaml")
    assert load_config(other, {"QUEUEING_CONFIG": path}).namespace == "explicit"


def test_database_url_precedence(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("postgresql+asyncpg://queueing:pw@db:5432/queueing\n")
    path = write(tmp_path, f"databaseURLFile: {secret}\n")
    assert (
        load_config(path, {}).resolved_database_url() == "postgresql+asyncpg://queueing:pw@db:5432/queueing"
    )
    env = {"QUEUEING_DATABASE_URL": "postgresql://other@h/db"}
    c = load_config(path, env)
    assert c.resolved_database_url() == "postgresql://other@h/db"
    assert "other@h" not in repr(c) and "pw" not in str(c.model_dump())  # secret stays hidden


@pytest.mark.parametrize(
    ("text", "env", "expected"),
    [
        ("waitForPodsReady:\n  timeout: soon\n", {}, "waitForPodsReady.timeout: not a duration: 'soon'"),
        (
            "leaderElection:\n  leaseDuration: 5s\n",
            {},
            "renewDeadline (10s) must be less than leaseDuration (5s)",
        ),
        (
            "leaderElection:\n  retryPeriod: 9s\n",
            {},
            "retryPeriod (9s) x 1.2 must be less than renewDeadline (10s)",
        ),
        (
            "leaderElection:\n  leaseDuration: 0s\n",
            {},
            "leaderElection.leaseDuration: must be greater than zero",
        ),
        ("planBindingMode: Partial\n", {}, "planBindingMode: Input should be 'Auto', 'Full' or 'NodeOnly'"),
        ("waitForPodsReady:\n  timout: 5m\n", {}, "waitForPodsReady.timout: unknown field"),
        (
            "fairSharing:\n  preemptionStrategies: [Never]\n",
            {},
            "fairSharing.preemptionStrategies[0]: Input should be",
        ),
        (
            "waitForPodsReady:\n  requeuingStrategy:\n    backoffLimitCount: -1\n",
            {},
            "waitForPodsReady.requeuingStrategy.backoffLimitCount: must be >= 0",
        ),
        (
            "waitForPodsReady:\n  requeuingStrategy:\n    backoffMaxSeconds: 5\n",
            {},
            "backoffMaxSeconds must be at least backoffBaseSeconds",
        ),
        ("metrics:\n  bindAddress: '8080'\n", {}, "metrics.bindAddress: '8080' is not HOST:PORT or :PORT"),
        ("health:\n  healthProbeBindAddress: ':99999'\n", {}, "health.healthProbeBindAddress"),
        ("ledger:\n  retention: 1h\n", {}, "ledger.retention: must be at least 24h, got 1h"),
        ("resyncPeriod: 1s\n", {}, "resyncPeriod: must be at least 10s"),
        (
            "admissionFairSharing:\n  resourceWeights: {gpu: -1}\n",
            {},
            "admissionFairSharing.resourceWeights[gpu]",
        ),
        ("databaseURL: mysql://x/y\n", {}, "databaseURL: Value error, unsupported URL scheme 'mysql'"),
        (
            "",
            {"QUEUEING_WAIT_FOR_PODS_READY__TIMEOUT": "later"},
            "(from environment variable QUEUEING_WAIT_FOR_PODS_READY__TIMEOUT)",
        ),
        ("", {"QUEUEING_FAIR_SHARING__PREEMPTION_STRATEGIES": "[not json"}, "environment:"),
        ("logLevel: chatty\n", {}, "logLevel: Input should be"),
        ("evictionTimeout: 0s\n", {}, "evictionTimeout: must be positive, got 0s"),
        ("- a list\n", {}, "expected a mapping of fields, got list"),
        ("a: [unclosed\n", {}, "not valid YAML"),
    ],
)
def test_bad_values_name_the_field(tmp_path: Path, text: str, env: dict[str, str], expected: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as e:
        load_config(path, env)
    msg = str(e.value).replace("Value error, ", "") if "Value error" not in expected else str(e.value)
    assert expected.replace("Value error, ", "") in msg.replace("Value error, ", ""), msg


def test_errors_say_where_the_value_came_from(tmp_path: Path) -> None:
    path = write(tmp_path, "waitForPodsReady:\n  timeout: soon\n")
    with pytest.raises(ConfigError, match=re.escape(f"from configuration file {path}")):
        load_config(path, {})
    with pytest.raises(ConfigError, match=re.escape("configuration file /nonexistent/config.yaml")):
        load_config("/nonexistent/config.yaml", {})


def test_database_url_file_problems_fail_at_start(tmp_path: Path) -> None:
    missing = tmp_path / "absent"
    with pytest.raises(ConfigError, match=re.escape(f"databaseURLFile: cannot read {missing}")):
        load_config(write(tmp_path, f"databaseURLFile: {missing}\n"), {})
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    with pytest.raises(ConfigError, match="is empty"):
        load_config(write(tmp_path, f"databaseURLFile: {empty}\n"), {})
    bad = tmp_path / "bad"
    bad.write_text("redis://cache:6379")
    with pytest.raises(ConfigError, match="unsupported URL scheme 'redis'"):
        load_config(write(tmp_path, f"databaseURLFile: {bad}\n"), {})


def test_same_field_twice_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="given twice"):
        load_config(write(tmp_path, "planBindingMode: Full\nplan_binding_mode: NodeOnly\n"), {})


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0s"), (0.25, "250ms"), (2, "2s"), (90, "1m30s"), (3600, "1h"), (604800, "168h")],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


def test_reference_documents_every_field_and_is_committed() -> None:
    undocumented = [path for path, desc in reference_fields() if not desc.strip()]
    assert undocumented == []
    committed = (ROOT / "docs" / "configuration.md").read_text()
    assert committed == render_reference(), "docs/configuration.md is stale: regenerate it with " + (
        "python -c 'from queueing.config import render_reference; print(render_reference(), end=\"\")' "
        "> docs/configuration.md"
    )


def test_reference_example_loads(tmp_path: Path) -> None:
    secret = tmp_path / "url"
    secret.write_text("postgresql+asyncpg://q@db/q")
    data = yaml.safe_load(example_config())
    data["databaseURLFile"] = str(secret)
    c = load_config(write(tmp_path, yaml.safe_dump(data)), {})
    assert c.wait_for_pods_ready.requeuing_strategy.backoff_limit_count == 5
    assert c.admission_fair_sharing is not None


def test_deployed_configmap_loads(tmp_path: Path) -> None:
    """The configuration file shipped in deploy/ is valid (with the Secret file it points to)."""
    data = yaml.safe_load((ROOT / "deploy" / "base" / "config.yaml").read_text())
    assert data["databaseURLFile"] == "/etc/queueing/database/url"
    secret = tmp_path / "url"
    secret.write_text("postgresql+asyncpg://queueing@postgres:5432/queueing")
    data["databaseURLFile"] = str(secret)
    c = load_config(write(tmp_path, yaml.safe_dump(data)), {"QUEUEING_NAMESPACE": "queueing-system"})
    assert c.leader_election.leader_elect is True
