"""The read-only web dashboard: queues, workloads, device map, history (see docs/dashboard.md)."""

from queueing.dashboard.server import DashboardServer
from queueing.dashboard.source import ControllerSource, DashboardSource, ReplaySource

__all__ = ["ControllerSource", "DashboardServer", "DashboardSource", "ReplaySource"]
