"""The verify-mode switch of the shell: ``QUEUEING_VERIFY=1`` in the environment turns on verify mode
(``queueing.dra.verify``) for ``queueing simulate`` and the controller: every fast path, memo and
cache of the cores also runs the general computation and raises ``VerifyError`` on a difference.
The cores never read the environment; the shell passes the switch in (``DraPlacer(verify=...)``,
``SchedulingConfig.verify``)."""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["ENV_VERIFY", "verify_from_env"]

ENV_VERIFY = "QUEUEING_VERIFY"
_ON = {"1", "true", "yes", "on"}
_OFF = {"", "0", "false", "no", "off"}


def verify_from_env(environ: Mapping[str, str]) -> bool:
    """Whether ``QUEUEING_VERIFY`` turns verify mode on (1/true/yes/on; 0/false/no/off or unset:
    off); ValueError naming the variable for anything else."""
    raw = environ.get(ENV_VERIFY, "")
    v = raw.strip().lower()
    if v in _ON:
        return True
    if v in _OFF:
        return False
    raise ValueError(f"environment variable {ENV_VERIFY}: {raw!r} is not a boolean (use 1 or 0)")
