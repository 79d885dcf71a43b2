"""queueing: DRA-aware, Kueue-style admission for GPU clusters."""

__version__ = "0.1.0"
