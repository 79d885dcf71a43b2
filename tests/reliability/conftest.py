"""The controller end-to-end fixtures (emulator, admin client, SQLite ledger, harness, stand-ins)."""

from tests.controller.conftest import admin, cluster, config, emu, harness, ledger  # noqa: F401
