"""The DRA CEL environment: compile-time type errors, runtime errors, quantity/semver exactness."""

from __future__ import annotations

import pytest

from queueing.api.quantity import Quantity
from queueing.dra.cel import (
    CELCompileError,
    CELRuntimeError,
    DeviceInput,
    SelectorCompiler,
    Version,
    VersionError,
    compile_selector,
    split_qualified_name,
)

DRIVER = "gpu.nvidia.com"
Q = Quantity.parse


@pytest.fixture(scope="module")
def compiler() -> SelectorCompiler:
    return SelectorCompiler()


@pytest.fixture(scope="module")
def h200() -> DeviceInput:
    # attribute/capacity names as an NVIDIA driver publishes them in a ResourceSlice (H200, nvml.json)
    return DeviceInput.from_qualified(
        DRIVER,
        {
            "type": "gpu",
            "productName": "NVIDIA H200",
            "architecture": "Hopper",
            "cudaComputeCapability": Version("9.0.0"),
            "driverVersion": Version("570.133.20"),
            "index": 0,
            "migEnabled": False,
            "resource.kubernetes.io/pcieRoot": "pci0000:00",
        },
        {
            "memory": Q("143771Mi"),
            "cpuShare": Q("500m"),
            "bandwidth": Q("12E"),  # 1.2e19 > int64 max (a binary 10Ei would be capped at int64 max)
            "example.com/slots": Q("4"),
        },
    )


def ok(compiler: SelectorCompiler, expr: str, dev: DeviceInput) -> bool:
    return compiler.compile(expr).matches(dev)


# ---- names ----------------------------------------------------------------------------------------


def test_split_qualified_name() -> None:
    assert split_qualified_name("productName", DRIVER) == (DRIVER, "productName")
    assert split_qualified_name("gpu.nvidia.com/productName", "other.io") == ("gpu.nvidia.com", "productName")
    assert split_qualified_name("resource.kubernetes.io/pcieRoot", DRIVER) == (
        "resource.kubernetes.io",
        "pcieRoot",
    )


def test_from_qualified_resolves_unqualified_names_to_the_driver_domain(h200: DeviceInput) -> None:
    assert h200.attributes[DRIVER]["productName"] == "NVIDIA H200"
    assert h200.attributes["resource.kubernetes.io"]["pcieRoot"] == "pci0000:00"
    assert "resource.kubernetes.io/pcieRoot" not in h200.attributes[DRIVER]
    assert h200.capacity["example.com"]["slots"] == Q("4")


def test_selector_sees_names_in_their_domains(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    assert ok(compiler, 'device.attributes["gpu.nvidia.com"].productName == "NVIDIA H200"', h200)
    assert ok(compiler, 'device.attributes["resource.kubernetes.io"].pcieRoot == "pci0000:00"', h200)
    assert ok(compiler, 'device.capacity["example.com"].slots == quantity("4")', h200)
    assert ok(compiler, 'device.driver == "gpu.nvidia.com"', h200)
    assert ok(compiler, "device.allowMultipleAllocations == false", h200)
    shared = DeviceInput(DRIVER, {}, {}, allow_multiple_allocations=True)
    assert ok(compiler, "device.allowMultipleAllocations", shared)


# ---- compile errors -------------------------------------------------------------------------------


def test_syntax_error_is_a_compile_error(compiler: SelectorCompiler) -> None:
    with pytest.raises(CELCompileError) as e:
        compiler.compile('device.driver == "a" &&')
    assert e.value.message.startswith("compilation failed:")
    assert "Syntax error" in e.value.message
    assert e.value.expression == 'device.driver == "a" &&'


def test_seed_high_memory_gpu_class_is_rejected_at_compile_time(compiler: SelectorCompiler) -> None:
    # the seed article's DeviceClass high-memory-gpu: capacity is keyed by domain first, so
    # device.capacity["memory"] is a map(string, Quantity) and has no isGreaterThan (upstream agrees)
    expr = 'device.capacity["memory"].isGreaterThan(quantity("40Gi"))'
    with pytest.raises(CELCompileError) as e:
        compiler.compile(expr)
    msg = str(e.value)
    assert "found no matching overload for 'isGreaterThan'" in msg
    assert "map(string, kubernetes.Quantity)" in msg
    assert "keyed by domain first" in msg
    assert 'device.capacity["<driver domain>"].memory' in msg
    assert "\n" not in msg


def test_driver_hint_names_the_domain_in_the_suggestion() -> None:
    with pytest.raises(CELCompileError) as e:
        compile_selector('device.capacity["memory"].isGreaterThan(quantity("40Gi"))', driver_hint=DRIVER)
    assert 'device.capacity["gpu.nvidia.com"].memory' in str(e.value)


def test_qualified_name_as_key_gets_a_split_suggestion(compiler: SelectorCompiler) -> None:
    with pytest.raises(CELCompileError) as e:
        compiler.compile('device.attributes["gpu.nvidia.com/productName"] == "NVIDIA H200"')
    assert 'device.attributes["gpu.nvidia.com"].productName' in str(e.value)


@pytest.mark.parametrize(
    "expr",
    [
        "device.driver == 1",  # string vs int
        'device.capacity["gpu.nvidia.com"].memory > quantity("1Gi")',  # no operators on Quantity
        'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(semver("1.0.0"))',
        'quantity(1) == quantity("1")',
        'device.unknownField == "x"',
        'quantity("1").sign() == 1',  # sign is a global function upstream: sign(q)
        'semver("1.0.0").isGreaterThan(quantity("1"))',
    ],
)
def test_type_errors_are_compile_errors(compiler: SelectorCompiler, expr: str) -> None:
    with pytest.raises(CELCompileError):
        compiler.compile(expr)


def test_non_bool_static_type_is_a_compile_error(compiler: SelectorCompiler) -> None:
    with pytest.raises(CELCompileError) as e:
        compiler.compile('device.driver + "x"')
    assert "must evaluate to bool" in str(e.value) and "string" in str(e.value)


def test_compile_errors_are_cached_too() -> None:
    c = SelectorCompiler()
    for _ in range(2):
        with pytest.raises(CELCompileError):
            c.compile("1 +")
    c.compile("true")
    c.compile("true")
    assert len(c) == 2
    assert c.compile("true") is c.compile("true")


# ---- runtime errors and guards --------------------------------------------------------------------


def test_missing_attribute_is_a_runtime_error(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    sel = compiler.compile('device.attributes["gpu.nvidia.com"].memoryType == "HBM3e"')
    with pytest.raises(CELRuntimeError) as e:
        sel.matches(h200)
    assert "no such key: memoryType" in str(e.value)


def test_has_and_in_guard_missing_keys(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    assert not ok(compiler, 'has(device.attributes["gpu.nvidia.com"].memoryType)', h200)
    assert not ok(
        compiler,
        'has(device.attributes["gpu.nvidia.com"].memoryType) && '
        'device.attributes["gpu.nvidia.com"].memoryType == "HBM3e"',
        h200,
    )
    assert ok(compiler, '"productName" in device.attributes["gpu.nvidia.com"]', h200)
    assert not ok(compiler, '"memoryType" in device.attributes["gpu.nvidia.com"]', h200)


def test_unknown_domain_reads_as_empty_map(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    # upstream returns an empty map for a domain the device does not have
    assert not ok(compiler, '"model" in device.attributes["nic.example.com"]', h200)
    assert not ok(compiler, 'has(device.capacity["nic.example.com"].bandwidth)', h200)
    with pytest.raises(CELRuntimeError, match="no such key: model"):
        compiler.compile('device.attributes["nic.example.com"].model == "x"').matches(h200)


def test_driver_domain_exists_even_without_attributes(compiler: SelectorCompiler) -> None:
    bare = DeviceInput("nic.example.com", {}, {})
    assert not ok(compiler, '"x" in device.attributes[device.driver]', bare)


def test_dyn_non_bool_result_is_a_runtime_error(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    sel = compiler.compile('device.attributes["gpu.nvidia.com"].index')  # dyn: accepted at compile time
    with pytest.raises(CELRuntimeError, match="must evaluate to bool, not int"):
        sel.matches(h200)


def test_bad_quantity_string_is_a_runtime_error(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    with pytest.raises(CELRuntimeError, match=r"invalid quantity '200K'"):
        compiler.compile('device.capacity["gpu.nvidia.com"].memory.isLessThan(quantity("200K"))').matches(
            h200
        )


def test_short_circuit_skips_errors(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    assert not ok(
        compiler,
        'device.driver == "nic.example.com" && device.attributes["nic.example.com"].model == "x"',
        h200,
    )


# ---- quantities -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("140Gi"))', True),  # 140.4Gi
        ('device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("141Gi"))', False),
        ('device.capacity["gpu.nvidia.com"].memory.compareTo(quantity("143771Mi")) == 0', True),
        # 500m exactly: not rounded to 0 or 1
        ('device.capacity["gpu.nvidia.com"].cpuShare.compareTo(quantity("0.5")) == 0', True),
        ('device.capacity["gpu.nvidia.com"].cpuShare.isLessThan(quantity("501m"))', True),
        ('device.capacity["gpu.nvidia.com"].cpuShare.isGreaterThan(quantity("499m"))', True),
        ('device.capacity["gpu.nvidia.com"].cpuShare == quantity("500m")', True),
        ('device.capacity["gpu.nvidia.com"].cpuShare.isInteger()', False),
        ('device.capacity["gpu.nvidia.com"].cpuShare.add(quantity("500m")).asInteger() == 1', True),
        ('device.capacity["gpu.nvidia.com"].cpuShare.asApproximateFloat() == 0.5', True),
        # 12E = 1.2e19 > int64 max: exact comparisons still work
        ('device.capacity["gpu.nvidia.com"].bandwidth.isGreaterThan(quantity("9223372036854775807"))', True),
        ('device.capacity["gpu.nvidia.com"].bandwidth.sub(quantity("1n")).isLessThan(quantity("12E"))', True),
        (
            'device.capacity["gpu.nvidia.com"].bandwidth.compareTo(quantity("12000000000000000000")) == 0',
            True,
        ),
        ('device.capacity["gpu.nvidia.com"].bandwidth.isInteger()', False),  # not an int64
        ('quantity("1Gi") == quantity("1024Mi")', True),
        ('quantity("200M").compareTo(quantity("0.2G")) == 0', True),
        ('quantity("50M").compareTo(quantity("50Mi")) == -1', True),
        ('quantity("50k").add(20).sub(quantity("100k")).sub(-50000) == quantity("20")', True),
        ('quantity("50k").sub(20000).asApproximateFloat() == 30000.0', True),
        ('quantity("50000000G").isInteger() && quantity("50k").asInteger() == 50000', True),
        ('quantity("2Gi").mul(2) == quantity("4Gi")', True),
        ('sign(quantity("-1m")) == -1 && sign(quantity("0")) == 0 && sign(quantity("3")) == 1', True),
        ('isQuantity("1.3Gi") && !isQuantity("200K") && !isQuantity("1,3G")', True),
    ],
)
def test_quantity_library(compiler: SelectorCompiler, h200: DeviceInput, expr: str, expected: bool) -> None:
    assert ok(compiler, expr, h200) is expected


def test_as_integer_beyond_int64_is_a_runtime_error(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    with pytest.raises(CELRuntimeError, match="cannot convert value to integer"):
        compiler.compile('device.capacity["gpu.nvidia.com"].bandwidth.asInteger() > 0').matches(h200)


# ---- semver ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expr", "expected"),
    [
        ('device.attributes["gpu.nvidia.com"].driverVersion.isGreaterThan(semver("570.0.0"))', True),
        ('device.attributes["gpu.nvidia.com"].driverVersion.isLessThan(semver("570.133.9"))', False),
        ('device.attributes["gpu.nvidia.com"].cudaComputeCapability.compareTo(semver("9.0.0")) == 0', True),
        ('device.attributes["gpu.nvidia.com"].driverVersion.major() == 570', True),
        ('device.attributes["gpu.nvidia.com"].driverVersion.minor() == 133', True),
        ('device.attributes["gpu.nvidia.com"].driverVersion.patch() == 20', True),
        ('semver("1.0.0-alpha").isLessThan(semver("1.0.0-alpha.1"))', True),
        ('semver("1.0.0-alpha.beta").isLessThan(semver("1.0.0-beta"))', True),
        ('semver("1.0.0-beta.2").isLessThan(semver("1.0.0-beta.11"))', True),  # numeric, not lexical
        ('semver("1.0.0-rc.1").isLessThan(semver("1.0.0"))', True),
        ('semver("1.2.3+build.5") == semver("1.2.3")', True),  # build metadata has no precedence
        ('semver("v1.2", true) == semver("1.2.0")', True),
        ('isSemver("1.2.3") && !isSemver("v1.2.3") && isSemver("v1.2.3", true) && !isSemver("01.2.3")', True),
    ],
)
def test_semver_library(compiler: SelectorCompiler, h200: DeviceInput, expr: str, expected: bool) -> None:
    assert ok(compiler, expr, h200) is expected


def test_version_value_type() -> None:
    assert Version("1.2.3-rc.1") < Version("1.2.3")
    assert Version("1.2.3+a") == Version("1.2.3+b")
    with pytest.raises(VersionError):
        Version("1.2")
    with pytest.raises(VersionError):
        Version("1.02.3")


def test_invalid_semver_is_a_runtime_error(compiler: SelectorCompiler, h200: DeviceInput) -> None:
    with pytest.raises(CELRuntimeError, match="not a semantic version"):
        compiler.compile('semver("1.2").major() == 1').matches(h200)


# ---- strings, regex, lists, bind ------------------------------------------------------------------


@pytest.mark.parametrize(
    "expr",
    [
        'device.attributes["gpu.nvidia.com"].productName.matches("^NVIDIA H[0-9]+$")',
        'device.attributes["gpu.nvidia.com"].productName.upperAscii() == "NVIDIA H200"',
        'device.attributes["gpu.nvidia.com"].architecture.lowerAscii() == "hopper"',
        'device.attributes["gpu.nvidia.com"].productName.split(" ")[1] == "H200"',
        '["a", "b"].join("-") == "a-b"',
        '"NVIDIA H200".replace("H200", "B200") == "NVIDIA B200"',
        '"  x ".trim() == "x"',
        '"NVIDIA H200".substring(7) == "H200" && "NVIDIA H200".substring(0, 6) == "NVIDIA"',
        '"NVIDIA H200".indexOf("H") == 7 && "abab".lastIndexOf("b") == 3',
        '"NVIDIA H200".startsWith("NVIDIA") && "NVIDIA H200".endsWith("200") && "ab".contains("b")',
        '"abc".charAt(1) == "b" && "%d GPUs".format([8]) == "8 GPUs"',
        '"abc123def45".find("[0-9]+") == "123" && "abc123def45".findAll("[0-9]+") == ["123", "45"]',
        "[1, 2, 3].isSorted() && [3, 1, 2].max() == 3 && [3, 1, 2].min() == 1 && [1, 2].sum() == 3",
        "sets.contains([1, 2, 3], [2]) && sets.intersects([1], [1, 5]) && sets.equivalent([1, 2], [2, 1])",
        '[0, 1].exists(i, i == device.attributes["gpu.nvidia.com"].index)',
        'cel.bind(gpu, device.attributes["gpu.nvidia.com"], '
        'gpu.type == "gpu" && gpu.architecture == "Hopper" && !gpu.migEnabled)',
        'cel.bind(mem, device.capacity["gpu.nvidia.com"].memory, '
        'mem.isGreaterThan(quantity("80Gi")) && mem.isLessThan(quantity("1Ti")))',
    ],
)
def test_string_regex_list_and_bind_functions(
    compiler: SelectorCompiler, h200: DeviceInput, expr: str
) -> None:
    assert ok(compiler, expr, h200) is True


def test_one_compiled_selector_evaluates_many_devices(compiler: SelectorCompiler) -> None:
    sel = compiler.compile(
        'device.driver == "gpu.nvidia.com" && '
        'device.capacity["gpu.nvidia.com"].memory.isGreaterThan(quantity("40Gi"))'
    )
    small = DeviceInput.from_qualified(DRIVER, {}, {"memory": Q("16Gi")})
    big = DeviceInput.from_qualified(DRIVER, {}, {"memory": Q("141Gi")})
    nic = DeviceInput.from_qualified("nic.example.com", {}, {"memory": Q("141Gi")})
    assert [sel.matches(d) for d in (small, big, nic, big)] == [False, True, False, True]
