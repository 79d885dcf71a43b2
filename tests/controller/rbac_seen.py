"""What the controller's service account was granted and what it used, over every end-to-end test of
this session (tests/controller/test_zz_rbac_coverage.py reads it after the other tests ran).

Its own module, always imported by this absolute name: pytest imports ``tests/controller/conftest.py`` as
``controller.conftest``, while test modules import ``tests.controller.conftest``, two module objects; a
dict in the conftest would be two dicts, and what one test recorded would be missing from the check."""

from __future__ import annotations

from typing import Any

RBAC_SEEN: dict[str, set[Any]] = {"granted": set(), "used": set(), "tests": set()}
