"""The client's JSON: orjson where it gives json's results, json where orjson refuses; verify mode
checks the two agree. And requests go through the ApiClient's session with its auth headers."""

from __future__ import annotations

import json
import math

import pytest

from queueing.dra.verify import VerifyError
from queueing.kube.client import NAMESPACES, KubeClient, api_client_for_url, dumps, loads
from queueing.testing import Emulator

BODIES = [
    {"metadata": {"name": "a", "labels": {"x": "ü ✓ <&>"}}, "spec": {"n": 3, "f": 0.1, "b": True, "z": None}},
    {"count": 2**70},  # beyond 64 bits: json's way
    {1: "int key"},  # non-str key: json's way ("1")
    [1, "two", [3.5, {"four": []}]],
]


@pytest.mark.parametrize("body", BODIES)
def test_dumps_reads_back_as_json_dumps_does(body: object) -> None:
    assert json.loads(dumps(body, verify=True)) == json.loads(json.dumps(body))


@pytest.mark.parametrize(
    "text",
    [json.dumps(b) for b in BODIES]
    + ['{"x": 1e400}', '{"big": -99999999999999999999999}', "[18446744073709551616, -9223372036854775809]"],
)
def test_loads_is_json_loads(text: str) -> None:
    for data in (text, text.encode()):
        assert json.dumps(loads(data, verify=True)) == json.dumps(json.loads(text))  # types too


def test_nan_is_json_s_on_read_and_a_difference_in_verify_mode_on_write() -> None:
    assert math.isnan(loads(b'{"x": NaN}')["x"])  # orjson refuses NaN: json reads it
    assert dumps({"x": float("nan")}) == b'{"x":null}'  # orjson writes null, json would write NaN
    with pytest.raises(VerifyError):
        dumps({"x": float("nan")}, verify=True)


async def test_requests_carry_the_api_client_s_auth_and_a_refreshed_token(emu: Emulator) -> None:
    api = api_client_for_url(emu.url, token="stale")
    refreshed = []

    def refresh(configuration: object) -> None:  # as an exec plugin or a token file would
        refreshed.append(True)
        api.configuration.api_key["BearerToken"] = "admin-token"

    api.configuration.refresh_api_key_hook = refresh
    try:
        kube = KubeClient(api, environ={"QUEUEING_VERIFY": "1"})
        assert kube.verify
        created = await kube.create(NAMESPACES, {"metadata": {"name": "auth-ns", "labels": {"a": "ü"}}})
        assert created["metadata"]["labels"] == {"a": "ü"} and refreshed
        assert await kube.request("DELETE", NAMESPACES.path(None, "auth-ns"), parse=False) is None
    finally:
        await api.close()
