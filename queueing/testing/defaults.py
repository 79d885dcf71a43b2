"""The real API server's defaulting of batch/v1 Jobs (Kubernetes 1.34), so that every test sees Jobs
as a real cluster makes them.

Decoding (``default_job``, on create and on update, before admission; as ``SetDefaults_Job`` and the
core/v1 defaults of the pod template):

* ``spec``: ``parallelism`` 1 and, when both are unset, ``completions`` 1; ``backoffLimit`` 6
  (2147483647 with ``backoffLimitPerIndex``); ``completionMode`` ``NonIndexed``; ``suspend`` false;
  ``podReplacementPolicy`` ``TerminatingOrFailed`` (``Failed`` when ``podFailurePolicy`` is set);
  ``manualSelector`` false; ``podFailurePolicy.rules[].onPodConditions[].status`` ``True``;
* ``metadata.labels``: the template's labels when the Job has none (what a client reads back);
* the pod template: ``dnsPolicy`` ``ClusterFirst``, ``restartPolicy`` ``Always`` (which Job
  validation then refuses: it must be ``OnFailure`` or ``Never``), ``securityContext`` ``{}``,
  ``terminationGracePeriodSeconds`` 30, ``schedulerName`` ``default-scheduler``; per container and init
  container ``imagePullPolicy`` (``Always`` for a ``latest`` or missing tag, else ``IfNotPresent``),
  ``terminationMessagePath`` ``/dev/termination-log``, ``terminationMessagePolicy`` ``File``, port
  ``protocol`` ``TCP``, probe thresholds (timeout 1, period 10, success 1, failure 3; ``httpGet`` path
  ``/`` and scheme ``HTTP``), ``fieldRef.apiVersion`` ``v1``; volumes without a source get
  ``emptyDir: {}``, secret, configMap, downwardAPI and projected volumes ``defaultMode`` 420.

Creating (``generate_job_selector``, the Job strategy's ``PrepareForCreate``, unless
``manualSelector`` is true): the template gets the labels ``controller-uid`` and
``batch.kubernetes.io/controller-uid`` (the Job's uid) and ``job-name`` and
``batch.kubernetes.io/job-name`` (its name), where not set; ``spec.selector.matchLabels`` gets
``batch.kubernetes.io/controller-uid``. ``validate_job`` checks the template's ``restartPolicy``.
"""

from __future__ import annotations

from typing import Any

from queueing.testing.schema import FieldError

__all__ = [
    "CONTROLLER_UID_LABEL",
    "JOB_NAME_LABEL",
    "LEGACY_CONTROLLER_UID_LABEL",
    "LEGACY_JOB_NAME_LABEL",
    "default_job",
    "generate_job_selector",
    "validate_job",
]

CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"
JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
LEGACY_CONTROLLER_UID_LABEL = "controller-uid"
LEGACY_JOB_NAME_LABEL = "job-name"

_MAX_INT32 = 2147483647
_DEFAULT_MODE = 420  # 0644


def _dict(parent: dict[str, Any], key: str) -> dict[str, Any] | None:
    v = parent.get(key)
    return v if isinstance(v, dict) else None


def _dicts(parent: dict[str, Any], key: str) -> list[dict[str, Any]]:
    v = parent.get(key)
    return [x for x in v if isinstance(x, dict)] if isinstance(v, list) else []


def _image_tag(image: str) -> str:
    """The tag of an image reference (``latest`` when it has neither a tag nor a digest)."""
    name, _, digest = image.partition("@")
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        return last.rsplit(":", 1)[1]
    return "" if digest else "latest"


def _default_probe(probe: dict[str, Any]) -> None:
    for k, v in (
        ("timeoutSeconds", 1),
        ("periodSeconds", 10),
        ("successThreshold", 1),
        ("failureThreshold", 3),
    ):
        if not probe.get(k):
            probe[k] = v
    http = _dict(probe, "httpGet")
    if http is not None:
        http.setdefault("path", "/")
        http.setdefault("scheme", "HTTP")


def _default_container(c: dict[str, Any]) -> None:
    if not c.get("imagePullPolicy"):
        c["imagePullPolicy"] = (
            "Always" if _image_tag(str(c.get("image") or "")) == "latest" else "IfNotPresent"
        )
    if not c.get("terminationMessagePath"):
        c["terminationMessagePath"] = "/dev/termination-log"
    if not c.get("terminationMessagePolicy"):
        c["terminationMessagePolicy"] = "File"
    for p in _dicts(c, "ports"):
        if not p.get("protocol"):
            p["protocol"] = "TCP"
    for kind in ("livenessProbe", "readinessProbe", "startupProbe"):
        probe = _dict(c, kind)
        if probe is not None:
            _default_probe(probe)
    for e in _dicts(c, "env"):
        ref = _dict(_dict(e, "valueFrom") or {}, "fieldRef")
        if ref is not None and not ref.get("apiVersion"):
            ref["apiVersion"] = "v1"


_VOLUME_SOURCES_WITH_MODE = ("secret", "configMap", "downwardAPI", "projected")


def _default_volume(v: dict[str, Any]) -> None:
    if all(k == "name" for k in v):
        v["emptyDir"] = {}
    for kind in _VOLUME_SOURCES_WITH_MODE:
        src = _dict(v, kind)
        if src is not None and src.get("defaultMode") is None:
            src["defaultMode"] = _DEFAULT_MODE


def _default_pod_spec(spec: dict[str, Any]) -> None:
    if not spec.get("dnsPolicy"):
        spec["dnsPolicy"] = "ClusterFirst"
    if not spec.get("restartPolicy"):
        spec["restartPolicy"] = "Always"
    if spec.get("securityContext") is None:
        spec["securityContext"] = {}
    if spec.get("terminationGracePeriodSeconds") is None:
        spec["terminationGracePeriodSeconds"] = 30
    if not spec.get("schedulerName"):
        spec["schedulerName"] = "default-scheduler"
    for kind in ("initContainers", "containers"):
        for c in _dicts(spec, kind):
            _default_container(c)
    for v in _dicts(spec, "volumes"):
        _default_volume(v)


def default_job(obj: dict[str, Any]) -> dict[str, Any]:
    """Apply the decoding defaults of a batch/v1 Job in place (see the module doc); returns ``obj``."""
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return obj
    if spec.get("completions") is None and spec.get("parallelism") is None:
        spec["completions"] = 1
    if spec.get("parallelism") is None:
        spec["parallelism"] = 1
    if spec.get("backoffLimit") is None:
        spec["backoffLimit"] = _MAX_INT32 if spec.get("backoffLimitPerIndex") is not None else 6
    if spec.get("completionMode") is None:
        spec["completionMode"] = "NonIndexed"
    if spec.get("suspend") is None:
        spec["suspend"] = False
    pfp = _dict(spec, "podFailurePolicy")
    if pfp is not None:
        for rule in _dicts(pfp, "rules"):
            for pattern in _dicts(rule, "onPodConditions"):
                if not pattern.get("status"):
                    pattern["status"] = "True"
    if spec.get("podReplacementPolicy") is None:
        spec["podReplacementPolicy"] = "Failed" if pfp is not None else "TerminatingOrFailed"
    if spec.get("manualSelector") is None:
        spec["manualSelector"] = False
    template = _dict(spec, "template")
    if template is None:
        template = spec["template"] = {}
    pod_spec = _dict(template, "spec")
    if pod_spec is None:
        pod_spec = template["spec"] = {}
    _default_pod_spec(pod_spec)
    _copy_template_labels(obj)
    return obj


def _copy_template_labels(obj: dict[str, Any]) -> None:
    """A Job without labels shows its template's labels (``SetDefaults_Job``)."""
    meta = obj.setdefault("metadata", {})
    labels = ((obj["spec"].get("template") or {}).get("metadata") or {}).get("labels")
    if isinstance(meta, dict) and isinstance(labels, dict) and labels and not meta.get("labels"):
        meta["labels"] = dict(labels)


def generate_job_selector(obj: dict[str, Any]) -> dict[str, Any]:
    """The Job strategy's selector generation on create (after ``metadata.uid`` is set), in place."""
    spec = obj.get("spec")
    if not isinstance(spec, dict) or spec.get("manualSelector") is True:
        return obj
    meta = obj.get("metadata") or {}
    uid, name = str(meta.get("uid") or ""), str(meta.get("name") or "")
    template = spec.setdefault("template", {})
    tmeta = template.get("metadata")
    if not isinstance(tmeta, dict):
        tmeta = template["metadata"] = {}
    labels = tmeta.get("labels")
    if not isinstance(labels, dict):
        labels = tmeta["labels"] = {}
    # the Job's labels are the template's map when it had none of its own (``SetDefaults_Job``
    # shares the map): they get the generated labels too
    mirrored = not meta.get("labels") or meta.get("labels") == labels
    for key in (LEGACY_JOB_NAME_LABEL, JOB_NAME_LABEL):
        labels.setdefault(key, name)
    for key in (LEGACY_CONTROLLER_UID_LABEL, CONTROLLER_UID_LABEL):
        labels.setdefault(key, uid)
    selector = spec.get("selector")
    if not isinstance(selector, dict):
        selector = spec["selector"] = {}
    match = selector.get("matchLabels")
    if not isinstance(match, dict):
        match = selector["matchLabels"] = {}
    match.setdefault(CONTROLLER_UID_LABEL, uid)
    if mirrored and isinstance(obj.get("metadata"), dict):
        obj["metadata"]["labels"] = dict(labels)
    return obj


def validate_job(obj: dict[str, Any]) -> list[FieldError]:
    """Job validation as far as the emulator checks it: the template's ``restartPolicy``."""
    spec = obj.get("spec") or {}
    pod_spec = (spec.get("template") or {}).get("spec") or {}
    policy = pod_spec.get("restartPolicy")
    if policy in ("OnFailure", "Never"):
        return []
    path = "spec.template.spec.restartPolicy"
    return [
        FieldError(
            path,
            "FieldValueNotSupported",
            f'{path}: Unsupported value: "{policy}": supported values: "OnFailure", "Never"',
        )
    ]
