"""The emulator defaults batch/v1 Jobs as the real API server does (queueing/testing/defaults.py), and
Jobs made from one YAML with different names share one fit signature once defaulted."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from queueing.api.core import Job
from queueing.api.registry import parse_object
from queueing.kube.client import JOBS, KubeClient
from queueing.scheduling.from_api import ApiContext, workload_info
from queueing.scheduling.jobs import workload_for_job
from queueing.testing import Emulator

JOB_YAML = """
apiVersion: batch/v1
kind: Job
metadata:
  generateName: train-
  namespace: default
  labels: {queueing.dra.io/queue-name: lq}
spec:
  parallelism: 2
  template:
    metadata:
      labels: {app: train}
      annotations: {simulate.queueing.dra.io/duration: 60s}
    spec:
      restartPolicy: Never
      containers:
      - name: main
        image: registry.example/train:1.2
        command: [python, train.py]
        ports: [{containerPort: 8080}]
        readinessProbe: {httpGet: {port: 8080}}
        env: [{name: POD, valueFrom: {fieldRef: {fieldPath: metadata.name}}}]
        resources:
          requests: {cpu: "2", memory: 4Gi}
          claims: [{name: gpu}]
      volumes: [{name: scratch}, {name: conf, configMap: {name: conf}}]
      resourceClaims:
      - {name: gpu, resourceClaimTemplateName: one-gpu}
"""

CLAIM_TEMPLATE = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaimTemplate",
    "metadata": {"name": "one-gpu", "namespace": "default"},
    "spec": {"spec": {"devices": {"requests": [{"name": "g", "exactly": {"deviceClassName": "gpu"}}]}}},
}


def job_body(name: str | None = None) -> dict[str, Any]:
    body: dict[str, Any] = yaml.safe_load(JOB_YAML)
    if name is not None:
        body["metadata"].pop("generateName")
        body["metadata"]["name"] = name
    return body


async def test_created_job_is_defaulted_like_the_api_server(kube: KubeClient) -> None:
    got = await kube.create(JOBS, job_body("train-a"))
    uid, spec = got["metadata"]["uid"], got["spec"]
    assert {k: spec[k] for k in spec if k not in ("template", "selector")} == {
        "parallelism": 2,
        "backoffLimit": 6,
        "completionMode": "NonIndexed",
        "suspend": False,
        "podReplacementPolicy": "TerminatingOrFailed",
        "manualSelector": False,
    }  # completions stays unset: parallelism was given
    assert spec["selector"] == {"matchLabels": {"batch.kubernetes.io/controller-uid": uid}}
    assert spec["template"]["metadata"]["labels"] == {
        "app": "train",
        "controller-uid": uid,
        "batch.kubernetes.io/controller-uid": uid,
        "job-name": "train-a",
        "batch.kubernetes.io/job-name": "train-a",
    }
    # the Job has labels of its own: they stay as given
    assert got["metadata"]["labels"] == {"queueing.dra.io/queue-name": "lq"}
    pod = spec["template"]["spec"]
    assert {
        k: pod[k] for k in ("restartPolicy", "dnsPolicy", "schedulerName", "terminationGracePeriodSeconds")
    } == {
        "restartPolicy": "Never",
        "dnsPolicy": "ClusterFirst",
        "schedulerName": "default-scheduler",
        "terminationGracePeriodSeconds": 30,
    }
    assert pod["securityContext"] == {}
    (c,) = pod["containers"]
    assert (c["imagePullPolicy"], c["terminationMessagePath"], c["terminationMessagePolicy"]) == (
        "IfNotPresent",
        "/dev/termination-log",
        "File",
    )
    assert c["ports"] == [{"containerPort": 8080, "protocol": "TCP"}]
    assert c["readinessProbe"] == {
        "httpGet": {"port": 8080, "path": "/", "scheme": "HTTP"},
        "timeoutSeconds": 1,
        "periodSeconds": 10,
        "successThreshold": 1,
        "failureThreshold": 3,
    }
    assert c["env"][0]["valueFrom"]["fieldRef"] == {"fieldPath": "metadata.name", "apiVersion": "v1"}
    assert pod["volumes"] == [
        {"name": "scratch", "emptyDir": {}},
        {"name": "conf", "configMap": {"name": "conf", "defaultMode": 420}},
    ]
    assert await kube.get(JOBS, "train-a", "default") == got


async def test_job_defaults_that_depend_on_other_fields(kube: KubeClient) -> None:
    body = job_body("plain")
    del body["metadata"]["labels"]
    del body["spec"]["parallelism"]
    body["spec"]["template"]["spec"]["containers"][0]["image"] = "busybox"
    body["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]
    }
    got = await kube.create(JOBS, body)
    uid, spec = got["metadata"]["uid"], got["spec"]
    assert (spec["completions"], spec["parallelism"]) == (1, 1)
    assert spec["podReplacementPolicy"] == "Failed"  # a podFailurePolicy is set
    assert spec["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget", "status": "True"}
    ]
    assert spec["template"]["spec"]["containers"][0]["imagePullPolicy"] == "Always"  # no tag: latest
    # a Job without labels shows its template's, the generated ones included
    assert got["metadata"]["labels"] == spec["template"]["metadata"]["labels"]
    assert got["metadata"]["labels"]["batch.kubernetes.io/controller-uid"] == uid
    indexed = job_body("per-index")
    indexed["spec"].update(completionMode="Indexed", completions=4, backoffLimitPerIndex=1)
    got = await kube.create(JOBS, indexed)
    assert (got["spec"]["backoffLimit"], got["spec"]["completionMode"]) == (2147483647, "Indexed")


async def test_manual_selector_and_user_labels_are_kept(kube: KubeClient) -> None:
    body = job_body("manual")
    body["spec"]["manualSelector"] = True
    body["spec"]["selector"] = {"matchLabels": {"app": "train"}}
    got = await kube.create(JOBS, body)
    assert got["spec"]["selector"] == {"matchLabels": {"app": "train"}}
    assert got["spec"]["template"]["metadata"]["labels"] == {"app": "train"}
    own = job_body("own-name")
    own["spec"]["template"]["metadata"]["labels"]["job-name"] = "mine"
    got = await kube.create(JOBS, own)
    labels = got["spec"]["template"]["metadata"]["labels"]
    assert (labels["job-name"], labels["batch.kubernetes.io/job-name"]) == ("mine", "own-name")


@pytest.mark.parametrize("policy", [None, "Always"])
async def test_job_restart_policy_must_be_never_or_on_failure(kube: KubeClient, policy: str | None) -> None:
    body = job_body("bad")
    tspec = body["spec"]["template"]["spec"]
    if policy is None:
        del tspec["restartPolicy"]
    else:
        tspec["restartPolicy"] = policy
    with pytest.raises(ApiException) as err:
        await kube.create(JOBS, body)
    assert err.value.status == 422
    status = json.loads(err.value.body)
    assert status["message"] == (
        'Job.batch "bad" is invalid: spec.template.spec.restartPolicy: Unsupported value: "Always": '
        'supported values: "OnFailure", "Never"'
    )
    assert status["details"]["causes"][0]["field"] == "spec.template.spec.restartPolicy"


async def test_an_update_without_the_defaults_is_defaulted_again(kube: KubeClient, emu: Emulator) -> None:
    created = await kube.create(JOBS, job_body("upd"))
    body = copy.deepcopy(created)
    for k in ("suspend", "backoffLimit", "podReplacementPolicy"):
        del body["spec"][k]
    got = await kube.replace(JOBS, body, "default")
    assert {k: got["spec"][k] for k in ("suspend", "backoffLimit", "podReplacementPolicy")} == {
        "suspend": False,
        "backoffLimit": 6,
        "podReplacementPolicy": "TerminatingOrFailed",
    }
    assert got["metadata"]["generation"] == created["metadata"]["generation"]  # nothing changed


async def test_jobs_from_one_yaml_share_a_fit_signature(kube: KubeClient) -> None:
    ctx = ApiContext.from_objects([parse_object(CLAIM_TEMPLATE)])  # type: ignore[list-item]

    async def signature(body: dict[str, Any]) -> str:
        job = Job.model_validate(await kube.create(JOBS, body))
        wl = workload_for_job(job)
        assert wl is not None
        return workload_info(wl, ctx).fit_signature

    a, b = await signature(job_body()), await signature(job_body())  # generateName: two names
    jobs = (await kube.list(JOBS, "default"))["items"]
    assert len({j["metadata"]["name"] for j in jobs}) == 2
    assert len({j["spec"]["template"]["metadata"]["labels"]["controller-uid"] for j in jobs}) == 2
    assert a == b
    named = job_body("named")
    named["spec"]["template"]["metadata"]["labels"]["team"] = "x"  # a label no selector reads
    named["spec"]["template"]["spec"]["containers"][0]["image"] = "registry.example/train:1.3"
    assert await signature(named) == a
    # a placement field differs: its own signature
    selector = job_body("selector")
    selector["spec"]["template"]["spec"]["nodeSelector"] = {"pool": "a"}
    more = job_body("more-cpu")
    more["spec"]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "3"
    sigs = {a, await signature(selector), await signature(more)}
    assert len(sigs) == 3
    # a template whose anti-affinity reads the job-name label keeps it: one signature per Job
    spread = job_body("spread-a")
    spread["spec"]["template"]["spec"]["affinity"] = {
        "podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"topologyKey": "kubernetes.io/hostname", "matchLabelKeys": ["batch.kubernetes.io/job-name"]}
            ]
        }
    }
    spread_b = copy.deepcopy(spread)
    spread_b["metadata"]["name"] = "spread-b"
    assert await signature(spread) != await signature(spread_b)
