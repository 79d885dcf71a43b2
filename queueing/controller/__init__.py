"""The controller: informers -> scheduling cycle -> executor (admission with plan binding).

``from queueing.controller.controller import Controller``; see that module and docs/concepts.md.
"""
