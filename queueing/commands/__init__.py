"""Subcommands of the ``queueing`` CLI: one module each, imported only when used.

A command module defines ``HELP: str``, ``add_arguments(parser)`` and ``run(args) -> int`` (the exit code).
Commands are the imperative shell: they read files, talk to databases or clusters and call the cores.
"""
