"""Kueue's Job labels, accepted next to ours when the configuration says so (``acceptKueueLabels``).

For clusters moving over from Kueue: a Job labelled ``kueue.x-k8s.io/queue-name`` (and
``kueue.x-k8s.io/priority-class``) is queued as if it carried ``queueing.dra.io/queue-name``
(``queueing.dra.io/priority-class``); where a Job has both, ours win. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["KUEUE_PRIORITY_CLASS_LABEL", "KUEUE_QUEUE_NAME_LABEL", "job_label"]

KUEUE_QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
_KUEUE = {
    "queueing.dra.io/queue-name": KUEUE_QUEUE_NAME_LABEL,
    "queueing.dra.io/priority-class": KUEUE_PRIORITY_CLASS_LABEL,
}


def job_label(labels: Mapping[str, str], label: str, accept_kueue: bool = False) -> tuple[str | None, str]:
    """(the value, the label it came from) of our ``label`` on a Job, else, when ``accept_kueue``, of
    Kueue's label for the same thing; (None, ``label``) when neither is set."""
    value = labels.get(label)
    if value:
        return value, label
    kueue = _KUEUE.get(label)
    if accept_kueue and kueue is not None and labels.get(kueue):
        return labels[kueue], kueue
    return None, label
