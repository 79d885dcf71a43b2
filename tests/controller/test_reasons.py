"""Reasons through the controller: two Jobs of one shape that cannot be placed are each told about
their own pods and claims, in the Workload condition, the Events and ``queueing explain``."""

from __future__ import annotations

from pathlib import Path

from queueing.kube.client import JOBS, KubeClient
from queueing.ledger.repository import Ledger
from queueing.testing import Emulator
from queueing.testing.cluster import StandIns
from tests.controller.conftest import GPU_CLASS, Harness, eventually, job
from tests.controller.test_eviction import explain
from tests.reliability.test_bad_input import messages, template

NAMES = ("alpha", "beta")


def told(emu: Emulator, name: str) -> str | None:
    """What users see about Job ``name`` once it is pending with a CEL runtime error, else None."""
    m = messages(emu, name)
    return m if "CEL runtime error" in m else None


async def test_jobs_of_one_shape_are_told_about_their_own_claims(
    emu: Emulator, admin: KubeClient, harness: Harness, cluster: StandIns, ledger: Ledger, tmp_path: Path
) -> None:
    # the selector fails at run time on every device (no attribute "nosuch"): neither Job can be
    # placed, and they share one shape, so the cycle decides for the first and tells the second
    emu.load_objects([template("bad-cel", GPU_CLASS, cel=f'device.attributes["{GPU_CLASS}"].nosuch == 1')])
    await harness.start()
    for name in NAMES:
        await admin.create(JOBS, job(name, template="bad-cel"))
    for name in NAMES:
        text = await eventually(lambda n=name: told(emu, n), f"{name} is told about the CEL error")
        other = next(n for n in NAMES if n != name)
        assert f"job-{other}-" not in text, text  # none of the other's pods or claims
        own = f"claim gpu of pod default/job-{name}-main-0 (from ResourceClaimTemplate default/bad-cel): "
        assert own in text, text
    out = await explain(emu, tmp_path, "default/beta")
    assert out.returncode == 0, out.stderr
    assert "claim gpu of pod default/job-beta-main-0 " in out.stdout, out.stdout
    assert "job-alpha-" not in out.stdout, out.stdout  # (its position may name job-alpha itself)
