"""Quantity versus the rules of k8s.io/apimachinery/pkg/api/resource.

Expected values come from the upstream rules (quantity.go ParseQuantity / CanonicalizeBytes,
suffix.go, amount.go) and, where marked "upstream test", from the cases in upstream's
quantity_test.go (TestQuantityParse, TestQuantityString, TestQuantityParseEmit, TestAdd, ...).
"""

from __future__ import annotations

from fractions import Fraction as F

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, ValidationError

from queueing.api.quantity import QUANTITY_PATTERN, Quantity, QuantityError, format_amount, is_bytes

Ki, Mi, Gi, Ti, Pi, Ei = (2**10, 2**20, 2**30, 2**40, 2**50, 2**60)
MAX_INT64 = 2**63 - 1

# (input, exact value, format after parsing, canonical string)
PARSE_CASES: list[tuple[str, F | int, str, str]] = [
    # -- plain decimal numbers and DecimalSI suffixes
    ("0", 0, "DecimalSI", "0"),
    ("1", 1, "DecimalSI", "1"),
    ("1.5", F(3, 2), "DecimalSI", "1500m"),  # doc example: 1.5 -> "1500m"
    ("100m", F(1, 10), "DecimalSI", "100m"),
    ("0.1", F(1, 10), "DecimalSI", "100m"),
    ("1000m", 1, "DecimalSI", "1"),  # largest exponent (multiple of 3) wins
    ("5n", F(5, 10**9), "DecimalSI", "5n"),
    ("4u", F(4, 10**6), "DecimalSI", "4u"),
    ("1000u", F(1, 1000), "DecimalSI", "1m"),
    ("8k", 8000, "DecimalSI", "8k"),
    ("50k", 50000, "DecimalSI", "50k"),
    ("1000M", 10**9, "DecimalSI", "1G"),  # upstream TestQuantityParseEmit
    ("7M", 7 * 10**6, "DecimalSI", "7M"),
    ("6G", 6 * 10**9, "DecimalSI", "6G"),
    ("40T", 40 * 10**12, "DecimalSI", "40T"),
    ("2.5P", F(5, 2) * 10**15, "DecimalSI", "2500T"),
    ("1E", 10**18, "DecimalSI", "1E"),  # "E" alone is exa (suffix table), not an exponent
    # decimal values are NOT capped at int64: upstream test "12E" -> 12 * 10^18
    ("12E", 12 * 10**18, "DecimalSI", "12E"),
    ("100.035k", 100035, "DecimalSI", "100035"),  # upstream test
    ("10.035M", 10035000, "DecimalSI", "10035k"),  # upstream test value 10035e3
    ("9.01", F(901, 100), "DecimalSI", "9010m"),
    ("0.0005k", F(1, 2), "DecimalSI", "500m"),  # upstream test
    # -- grammar quirks of parseQuantityString: "<digits>." and ".<digits>" are numbers
    ("1.", 1, "DecimalSI", "1"),
    (".001", F(1, 1000), "DecimalSI", "1m"),
    ("1.G", 10**9, "DecimalSI", "1G"),  # upstream: "we currently allow 1.G"
    ("+1", 1, "DecimalSI", "1"),
    ("007", 7, "DecimalSI", "7"),  # leading zeros are stripped
    # a sign or dot with no digits scans as the number 0 (upstream TestParseQuantityString ".")
    (".", 0, "DecimalSI", "0"),
    ("-.", 0, "DecimalSI", "0"),
    # -- negative values: canonical form is the positive form with "-"
    ("-1.5", F(-3, 2), "DecimalSI", "-1500m"),
    ("-9.01", F(-901, 100), "DecimalSI", "-9010m"),  # upstream TestQuantityNeg: "-9010m"
    ("-1Gi", -Gi, "BinarySI", "-1Gi"),
    ("-0", 0, "DecimalSI", "0"),  # never "-0"
    # -- binary suffixes: canonical uses the largest power of 1024 that divides the value
    ("1Ki", Ki, "BinarySI", "1Ki"),
    ("1024Mi", Gi, "BinarySI", "1Gi"),  # upstream TestQuantityParseEmit
    ("1.5Gi", 3 * Gi // 2, "BinarySI", "1536Mi"),  # doc example: 1.5Gi -> "1536Mi"
    ("0.5Mi", Mi // 2, "BinarySI", "512Ki"),
    ("1001Gi", 1001 * Gi, "BinarySI", "1001Gi"),
    ("5Ti", 5 * Ti, "BinarySI", "5Ti"),
    ("4Pi", 4 * Pi, "BinarySI", "4Pi"),
    ("3Ei", 3 * Ei, "BinarySI", "3Ei"),
    ("0Ki", 0, "BinarySI", "0"),  # zero keeps the parsed format but prints "0"
    # BinarySI with |v| < 1024 prints as DecimalSI (CanonicalizeBytes: "avoids rounding")
    ("1025", 1025, "DecimalSI", "1025"),
    ("1Ki", 1024, "BinarySI", "1Ki"),
    (".001Ki", F(1024, 1000), "BinarySI", "1024m"),  # upstream TestQuantityParseEmit
    (".000001Ki", F(1024, 10**6), "DecimalSI", "1024u"),  # 0<|v|<1: format becomes DecimalSI
    # a fractional BinarySI value >= 1024 falls back to DecimalSI so no precision is lost
    ("100.035Ki", F(10243584, 100), "BinarySI", "102435840m"),  # upstream test value
    ("1.1Ki", F(11264, 10), "BinarySI", "1126400m"),
    # BinarySI is capped at 2^63-1 in magnitude (upstream test "9Ei" -> maxAllowed)
    ("9Ei", MAX_INT64, "BinarySI", "9223372036854775807"),
    ("-9Ei", -MAX_INT64, "BinarySI", "-9223372036854775807"),
    ("9223372036854775807Ki", MAX_INT64, "BinarySI", "9223372036854775807"),
    ("8Ei", MAX_INT64, "BinarySI", "9223372036854775807"),  # 2^63 is one past the cap
    # -- decimal exponents: mantissa integer, exponent a multiple of 3 as large as possible
    ("1e3", 1000, "DecimalExponent", "1e3"),
    ("1E6", 10**6, "DecimalExponent", "1e6"),
    ("1e-3", F(1, 1000), "DecimalExponent", "1e-3"),
    ("1E-3", F(1, 1000), "DecimalExponent", "1e-3"),  # upstream test "1E-3"
    ("1.3E+6", 1300000, "DecimalExponent", "1300e3"),  # upstream test value 13e5
    ("1.2e3", 1200, "DecimalExponent", "1200"),  # exponent 0 prints no suffix
    ("80e-3", F(80, 1000), "DecimalExponent", "80e-3"),  # upstream TestQuantityString
    ("300e6", 300 * 10**6, "DecimalExponent", "300e6"),
    ("1e14", 10**14, "DecimalExponent", "100e12"),
    ("1e21", 10**21, "DecimalExponent", "1e21"),  # exponent form has no upper suffix limit
    ("0e5", 0, "DecimalExponent", "0"),
    # -- rounding to 1n, away from zero (ParseQuantity: amount.Round(Nano, inf.RoundUp))
    ("3.001n", F(4, 10**9), "DecimalSI", "4n"),  # upstream test
    ("1.1E-9", F(2, 10**9), "DecimalExponent", "2e-9"),  # upstream test
    ("0.0000000001", F(1, 10**9), "DecimalSI", "1n"),  # upstream test
    ("0.5e-9", F(1, 10**9), "DecimalExponent", "1e-9"),  # upstream test: rounds up, not half-even
    ("0.00000012345", F(124, 10**9), "DecimalSI", "124n"),  # upstream test
    ("-0.1n", F(-1, 10**9), "DecimalSI", "-1n"),  # away from zero: magnitude rounds up
    ("0.000000000001Ki", F(2, 10**9), "DecimalSI", "2n"),  # 1.024e-12 -> 2n, format changes
    ("1e-999999", F(1, 10**9), "DecimalExponent", "1e-9"),  # any non-zero value is at least 1n
]


@pytest.mark.parametrize(("text", "value", "fmt", "canonical"), PARSE_CASES)
def test_parse_table(text: str, value: F | int, fmt: str, canonical: str) -> None:
    q = Quantity.parse(text)
    assert q.value == value
    assert q.format == fmt
    assert str(q) == canonical
    assert q.original == text
    # the canonical text parses back to the same value
    assert Quantity.parse(canonical) == q


def test_table_is_large_enough() -> None:
    assert len(PARSE_CASES) >= 40


# upstream TestQuantityParse "invalid" list, plus suffix/grammar errors from suffix.go
INVALID = [
    ("", "regular expression"),
    ("1.1.M", "regular expression"),
    ("1+1.0M", "regular expression"),
    ("0.1mi", "suffix 'mi'"),  # suffixes are case-sensitive
    ("0.1am", "regular expression"),
    ("aoeu", "regular expression"),
    (".5i", "suffix 'i'"),
    ("1i", "suffix 'i'"),
    ("-3.01i", "suffix 'i'"),
    ("-3.01e-", "suffix 'e-'"),
    (" 1", "regular expression"),  # ParseQuantity allows no whitespace
    ("1 ", "regular expression"),
    ("1\n", "regular expression"),
    ("1K", "suffix 'K'"),  # kilo is lowercase "k"; "K" only in "Ki"
    ("1KiB", "regular expression"),
    ("1e", "suffix 'e'"),  # an exponent needs digits
    ("1e3.5", "regular expression"),
    ("--1", "suffix '-1'"),
    ("1,000", "regular expression"),
    ("1e1001", "exponent 1001"),  # our documented limit
]


@pytest.mark.parametrize(("text", "message"), INVALID)
def test_invalid(text: str, message: str) -> None:
    with pytest.raises(QuantityError) as err:
        Quantity.parse(text)
    assert message in str(err.value)
    assert repr(text) in str(err.value)  # the error names the offending text


def test_non_string_is_rejected() -> None:
    with pytest.raises(QuantityError, match="must be a string"):
        Quantity.parse(5)  # type: ignore[arg-type]


# -- comparisons: by exact value, independent of format ---------------------------------------
@pytest.mark.parametrize(
    ("a", "b", "cmp"),
    [
        ("1Gi", "1G", 1),  # 1073741824 > 1000000000
        ("1G", "1Gi", -1),
        ("1000Mi", "1G", 1),  # 1048576000 > 10^9
        ("953Mi", "1G", -1),  # 999292928 < 10^9
        ("100m", "0.1", 0),
        ("100m", "50m", 1),  # upstream TestQuantityCmp
        ("10000T", "100Gi", 1),  # upstream TestQuantityCmp
        ("1", "1000m", 0),
        ("1e3", "1k", 0),
        ("1Ki", "1024", 0),
        ("-1", "0", -1),
        ("0.5e-9", "1n", 0),  # equal after rounding
        ("12E", "9Ei", 1),  # decimal not capped, binary capped
    ],
)
def test_compare(a: str, b: str, cmp: int) -> None:
    qa, qb = Quantity.parse(a), Quantity.parse(b)
    assert (qa > qb) == (cmp > 0)
    assert (qa < qb) == (cmp < 0)
    assert (qa == qb) == (cmp == 0)
    assert (qa >= qb) == (cmp >= 0)
    assert (qa <= qb) == (cmp <= 0)
    if cmp == 0:
        assert hash(qa) == hash(qb)


def test_compare_with_numbers() -> None:
    assert Quantity.parse("2") == 2
    assert Quantity.parse("1500m") == F(3, 2)
    assert Quantity.parse("1500m") > 1
    assert Quantity.parse("1500m") < 2
    assert Quantity.parse("1") != "1"  # strings are not quantities
    assert not Quantity.parse("0")
    assert Quantity.parse("1n")


# -- Value()/MilliValue(): round away from zero (negativeScaleInt64) ---------------------------
@pytest.mark.parametrize(
    ("text", "value", "milli"),
    [
        ("1", 1, 1000),
        ("1.5", 2, 1500),
        ("100m", 1, 100),
        ("1n", 1, 1),  # 1e-6 milli rounds away from zero to 1 (upstream TestScaledValue)
        ("1u", 1, 1),
        ("1001m", 2, 1001),
        ("-1.5", -2, -1500),  # away from zero, not towards +inf
        ("-1n", -1, -1),
        ("1Gi", Gi, Gi * 1000),
        ("0", 0, 0),
        ("12E", 12 * 10**18, 12 * 10**21),  # no int64 overflow here (documented difference)
    ],
)
def test_int_values(text: str, value: int, milli: int) -> None:
    q = Quantity.parse(text)
    assert q.as_int() == value
    assert q.milli_value() == milli


# -- arithmetic ---------------------------------------------------------------------------------
def test_arithmetic_values() -> None:
    p = Quantity.parse
    assert p("1Gi") + p("512Mi") == p("1.5Gi")
    assert str(p("1Gi") + p("512Mi")) == "1536Mi"
    assert str(p("1") - p("100m")) == "900m"
    assert str(p("100m") - p("1")) == "-900m"
    assert str(p("250m") * 4) == "1"
    assert str(3 * p("1Gi")) == "3Gi"
    assert str(-p("1Gi")) == "-1Gi"
    assert sum([p("1Gi"), p("1Gi")], Quantity(0)) == 2 * Gi
    assert str(sum([p("1Gi"), p("1Gi")])) == "2Gi"  # 0 + q keeps q's format
    assert p("1") + 1 == 2
    assert str(p("1") + F(1, 3)) == "1333333334n"  # a Fraction operand is rounded to 1n
    assert str(p("1") - F(1, 3)) == "666666667n"  # 2/3 rounded away from zero
    assert 5 - p("2") == 3


@pytest.mark.parametrize(
    ("a", "op", "b", "expected"),
    [
        # upstream TestAdd/TestSub: the receiver's format is kept ...
        ("10", "+", "1Ki", "1034"),
        ("2Ki", "+", "1k", "3048"),  # BinarySI kept; 3048 is not a multiple of 1024
        ("2Ki", "+", "2048", "4Ki"),  # BinarySI kept: 4096 prints as 4Ki
        ("1k", "+", "24", "1024"),  # DecimalSI kept: 1024 does not print as 1Ki
        ("10Ki", "-", "1", "10239"),
        # ... unless it is zero, then the other's (TestQuantityAddZeroPreservesSuffix)
        ("0", "+", "1Gi", "1Gi"),
        ("0", "+", "100m", "100m"),
        ("0", "-", "1Gi", "-1Gi"),
        ("1Gi", "+", "0", "1Gi"),
        ("1Gi", "-", "0", "1Gi"),
    ],
)
def test_arithmetic_format(a: str, op: str, b: str, expected: str) -> None:
    qa, qb = Quantity.parse(a), Quantity.parse(b)
    result = qa + qb if op == "+" else qa - qb
    assert result == Quantity.parse(expected)
    assert str(result) == expected


def test_computed_quantity_original_is_canonical() -> None:
    q = Quantity.parse("1Gi") + Quantity.parse("1Gi")
    assert q.original == "2Gi"


def test_from_value() -> None:
    assert str(Quantity.from_value(1536 * Mi, "BinarySI")) == "1536Mi"
    assert str(Quantity.from_value(1536 * Mi)) == "1610612736"
    assert str(Quantity.from_value(10**9, "DecimalExponent")) == "1e9"
    assert str(Quantity.from_value(F(1, 3))) == "333333334n"  # rounded up to 1n
    assert str(Quantity.from_value(F(-1, 3))) == "-333333334n"  # away from zero
    assert str(Quantity.from_value(1024, "BinarySI")) == "1Ki"  # upstream TestNewSet
    assert str(Quantity.from_value(F(1024, 1000), "BinarySI")) == "1024m"  # TestMilliNewSet
    with pytest.raises(QuantityError):
        Quantity.from_value(1.5)  # type: ignore[arg-type]


def test_canonical_beyond_the_largest_suffix_keeps_the_value() -> None:
    # Upstream would print 10^21 in DecimalSI without a suffix ("1"), changing the value; we grow
    # the mantissa of the largest suffix instead.
    assert str(Quantity.parse("1000E")) == "1000E"
    assert Quantity.parse("1000E") == 10**21
    # A computed BinarySI value past the parse cap (2^63-1) prints as DecimalSI, because binary
    # text that large would be capped when parsed back.
    big = Quantity.parse("4Ei") * 256
    assert big == 2**70
    assert str(big) == str(2**70)
    assert Quantity.parse(str(big)) == big
    assert Quantity.parse("1024Ei") == MAX_INT64  # what the binary text would have become
    assert str(Quantity.parse("7Ei")) == "7Ei"  # largest binary text below the cap


# -- pydantic integration -------------------------------------------------------------------------
class _Res(BaseModel):
    requests: dict[str, Quantity]


def test_pydantic_round_trip_keeps_what_was_given() -> None:
    given = {"requests": {"cpu": "1.5", "memory": "1024Mi", "pods": 110, "x": 0.5, "y": " 2 "}}
    m = _Res.model_validate(given)
    assert m.requests["cpu"] == F(3, 2)
    assert m.requests["memory"] == Gi
    assert m.requests["pods"] == 110
    assert m.requests["x"] == F(1, 2)
    assert m.requests["y"] == 2  # the JSON path trims whitespace (UnmarshalJSON)
    assert m.model_dump(mode="json") == given
    assert _Res.model_validate(m.model_dump(mode="json")) == m


def test_pydantic_error_names_field() -> None:
    with pytest.raises(ValidationError) as err:
        _Res.model_validate({"requests": {"cpu": "1.5 cores"}})
    text = str(err.value)
    assert "requests.cpu" in text
    assert "1.5 cores" in text
    with pytest.raises(ValidationError):
        _Res.model_validate({"requests": {"cpu": True}})
    with pytest.raises(ValidationError):
        _Res.model_validate({"requests": {"cpu": float("nan")}})


def test_json_schema_is_int_or_string() -> None:
    schema = _Res.model_json_schema()["properties"]["requests"]["additionalProperties"]
    assert schema["x-kubernetes-int-or-string"] is True
    assert schema["pattern"] == QUANTITY_PATTERN
    assert {"type": "integer"} in schema["anyOf"] and {"type": "string"} in schema["anyOf"]


# -- properties -----------------------------------------------------------------------------------
_SUFFIXES = ["", "n", "u", "m", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei"]
_quantity_text = st.builds(
    lambda sign, whole, frac, suffix: f"{sign}{whole}{'.' + frac if frac else ''}{suffix}",
    st.sampled_from(["", "-", "+"]),
    st.integers(min_value=0, max_value=10**12).map(str),
    st.one_of(st.just(""), st.integers(min_value=0, max_value=10**6).map(str)),
    st.one_of(
        st.sampled_from(_SUFFIXES),
        st.integers(min_value=-30, max_value=30).map(lambda e: f"e{e}"),
    ),
)
_quantities = st.one_of(
    _quantity_text.map(Quantity.parse),
    st.builds(
        Quantity.from_value,
        st.fractions(max_denominator=10**12),
        st.sampled_from(["BinarySI", "DecimalSI", "DecimalExponent"]),
    ),
)


@settings(deadline=None)  # no timing dependence
@given(_quantities)
def test_property_canonical_round_trip(q: Quantity) -> None:
    text = str(q)
    back = Quantity.parse(text)
    assert back == q
    assert str(back) == text  # canonical form is a fixed point
    assert (q.value * 10**9).denominator == 1  # always a multiple of 1n


@settings(deadline=None)  # no timing dependence
@given(_quantities, _quantities)
def test_property_add_sub(a: Quantity, b: Quantity) -> None:
    assert a + b - b == a
    assert a + b == b + a
    assert (a < b) == (a.value < b.value)


@settings(deadline=None)  # no timing dependence
@given(_quantity_text)
def test_property_parse_rounds_up_to_nano(text: str) -> None:
    q = Quantity.parse(text)
    # the parsed value is within 1n of the exact decimal value and never closer to zero
    if q.format != "BinarySI" or abs(q.value) < MAX_INT64:
        assert abs(q.value) * 10**9 - 1 < abs(_exact(text)) * 10**9 <= abs(q.value) * 10**9


def _exact(text: str) -> F:
    """Independent exact reading of generated quantity text (no rounding, no cap)."""
    for suf, mult in [("Ki", Ki), ("Mi", Mi), ("Gi", Gi), ("Ti", Ti), ("Pi", Pi), ("Ei", Ei)]:
        if text.endswith(suf):
            return F(text[: -len(suf)]) * mult
    dec = {"n": -9, "u": -6, "m": -3, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
    if "e" in text:
        num, exp = text.split("e")
        return F(num) * F(10) ** int(exp)
    if text and text[-1] in dec:
        return F(text[:-1]) * F(10) ** dec[text[-1]]
    return F(text)


# ---- amounts shown to users (reasons, reports): as kubectl prints quantities
@pytest.mark.parametrize(
    ("value", "resource", "text"),
    [
        (16 * 2**30, "memory", "16Gi"),
        (141 * 2**30, "gpu.nvidia.com/memory", "141Gi"),
        (147540934656, "memory", "140706Mi"),  # a sum of Mi amounts, not a whole Gi
        (16 * 10**9, "memory", "16G"),  # decimal is shorter: as given
        (1024, "memory", "1Ki"),
        (1000, "ephemeral-storage", "1k"),
        (2**21, "hugepages-2Mi", "2Mi"),
        (F(1, 2), "cpu", "500m"),
        (F(3, 2), "cpu", "1500m"),
        (1024, "cpu", "1024"),  # not bytes: never binary
        (8, "gpu.nvidia.com", "8"),
        (0, "memory", "0"),
        (-(2**30), "memory", "-1Gi"),
        (F(1, 3), "cpu", "333333334n"),  # finer than 1n rounds away from zero, as parsing does
        (F(5, 2), None, "2500m"),
    ],
)
def test_format_amount_prints_as_kubectl(value: int | F, resource: str | None, text: str) -> None:
    assert format_amount(value, resource) == text


@settings(max_examples=300, deadline=None)
@given(st.integers(-(2**62), 2**62), st.integers(0, 9), st.sampled_from(["memory", "cpu", "gpu", "x/memory"]))
def test_format_amount_reads_back_as_the_amount(n: int, nano_digits: int, resource: str) -> None:
    value = F(n, 10**nano_digits)
    back = Quantity.parse(format_amount(value, resource)).value
    assert back == value  # exact: every value here is a multiple of 1n
    assert format_amount(Quantity.from_value(value), resource) == format_amount(value, resource)


def test_is_bytes() -> None:
    assert all(
        is_bytes(r)
        for r in ("memory", "storage", "ephemeral-storage", "hugepages-1Gi", "gpu.nvidia.com/memory")
    )
    assert not any(is_bytes(r) for r in ("cpu", "pods", "nvidia.com/gpu", "gpu.nvidia.com", "memoryless"))
