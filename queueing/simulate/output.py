"""Printing a simulation: JSON lines, a table for people, and the plot (matplotlib, optional)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TextIO

from queueing.simulate.engine import SimEvent, SimResult, Summary

__all__ = ["PlotUnavailable", "plot", "write_json", "write_table"]


class PlotUnavailable(Exception):
    """matplotlib is missing (or cannot draw); the message says how to get it."""


def write_json(result: SimResult, out: TextIO) -> None:
    for e in result.events:
        out.write(json.dumps(e.to_json()) + "\n")
    out.write(json.dumps(result.summary.to_json()) + "\n")


def _fmt_time(t: float | None) -> str:
    if t is None:
        return "-"
    if t < 60:
        return f"{t:.0f}s" if t == int(t) else f"{t:.1f}s"
    m, s = divmod(round(t), 60)
    if m < 60:
        return f"{m}m{s:02d}s"
    h, m = divmod(m, 60)
    return f"{h}h{m:02d}m{s:02d}s"


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")


def _event_rows(events: Iterable[SimEvent]) -> list[list[str]]:
    rows = [["TIME", "EVENT", "JOB", "CLUSTERQUEUE", "DETAIL"]]
    for e in events:
        detail = e.reason
        if e.event == "Admitted":
            nodes = sorted(set(e.nodes or ()))
            detail = f"{e.reason}; {len(e.nodes or ())} pod(s) on {', '.join(nodes) if nodes else '-'}"
        elif e.event == "Evicted" and e.preemptor:
            detail = f"{e.reason} by {e.preemptor}"
        rows.append([_fmt_time(e.time), e.event, e.job, e.cluster_queue or "-", detail])
    return rows


def write_summary_table(s: Summary, out: TextIO) -> None:
    rows = [
        [
            "CLUSTERQUEUE",
            "ADMITTED",
            "EVICTED",
            "FINISHED",
            "PENDING",
            "MEAN WAIT",
            "P90 WAIT",
            "DEVICE-HOURS",
        ]
    ]
    for name, q in sorted(s.cluster_queues.items()):
        rows.append(
            [
                name,
                str(q.admitted),
                str(q.evicted),
                str(q.finished),
                str(q.pending),
                _fmt_time(q.mean_wait),
                _fmt_time(q.p90_wait),
                f"{q.device_seconds / 3600:.2f}",
            ]
        )
    _table(rows, out)
    out.write(
        f"\n{s.jobs} jobs, {s.finished} finished in {_fmt_time(s.time)} of virtual time; "
        f"device utilisation {s.device_utilisation * 100:.1f}% of {s.devices} devices; {s.cycles} cycles\n"
    )


def write_table(result: SimResult, out: TextIO) -> None:
    _table(_event_rows(result.events), out)
    out.write("\n")
    write_summary_table(result.summary, out)


def plot(result: SimResult, path: str) -> None:
    """Queue lengths (pending jobs per ClusterQueue) and device utilisation over virtual time."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise PlotUnavailable(
            "--plot needs matplotlib, which is not installed: pip install 'queueing[plot]' (or pip install matplotlib)"
        ) from None
    samples = result.samples
    total = result.summary.devices or 1
    cqs = sorted({cq for s in samples for cq in s.pending} | set(result.summary.cluster_queues))
    fig, (ax1, ax2) = plt.subplots(2, 1, sharex=True, figsize=(10, 6))
    xs = [s.time for s in samples]
    for cq in cqs:
        if not cq:
            continue
        ax1.step(xs, [s.pending.get(cq, 0) for s in samples], where="post", label=cq)
    ax1.set_ylabel("pending jobs")
    ax1.yaxis.get_major_locator().set_params(integer=True)
    ax1.set_title("queue lengths")
    if cqs:
        ax1.legend(loc="upper right", fontsize="small")
    ax2.step(xs, [100.0 * s.busy / total for s in samples], where="post", color="tab:green")
    ax2.set_ylabel("devices in use (%)")
    ax2.set_ylim(0, 105)
    ax2.set_xlabel("virtual time (s)")
    ax2.set_title(f"device utilisation (mean {result.summary.device_utilisation * 100:.1f}%)")
    fig.tight_layout()
    try:
        fig.savefig(path)
    except OSError as e:
        raise PlotUnavailable(f"--plot: cannot write {path}: {e.strerror or e}") from None
    finally:
        plt.close(fig)
