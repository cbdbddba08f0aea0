"""Record field checks and defaults, against the official `pulsar.schema`.

An application's records fail (or are accepted) the same way whichever
client it runs on: the same exception types for the same bad values, the
same defaults for fields not given. Record classes are built with `type()`
so that one declaration serves both modules.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from types import ModuleType
from typing import Any

import pytest

from magnetar.client import schema as ours


class Color(Enum):
    red = 1
    green = 2
    blue = 3


class OtherEnum(Enum):
    red = 1


@pytest.fixture(scope="module")
def official() -> Any:
    return pytest.importorskip("pulsar.schema")


def rec(m: Any, name: str, **attrs: Any) -> Any:
    return type(name, (m.Record,), attrs)


def example(m: Any) -> Any:
    return rec(
        m,
        "Example",
        i=m.Integer(),
        l=m.Long(),
        b=m.Boolean(),
        f=m.Float(),
        s=m.String(),
        n=m.Null(),
        c=Color,
        a=m.Array(m.String()),
        mp=m.Map(m.Integer()),
        ri=m.Integer(required=True),
    )


# (field, value) pairs; the official client's outcome is the expectation.
FIELD_VALUES = [
    ("i", 1.5),
    ("i", "1"),
    ("i", True),
    ("l", 1.12),
    ("b", 1),
    ("b", None),
    ("f", "1"),
    ("f", 1),
    ("s", 2),
    ("s", b"bytes"),
    ("s", None),
    ("n", 1),
    ("n", None),
    ("c", "redx"),
    ("c", 5),
    ("c", OtherEnum.red),
    ("c", True),
    ("c", "red"),
    ("c", 2),
    ("c", None),
    ("a", 1),
    ("a", [1]),
    ("a", ("x",)),
    ("a", ["1", "2", 3]),
    ("mp", 1),
    ("mp", {1: 1}),
    ("mp", {"a": "1"}),
    ("ri", None),
]


def _outcome(make: Callable[[], Any]) -> str:
    try:
        make()
    except Exception as exc:
        return type(exc).__name__
    return "ok"


@pytest.mark.parametrize(("field", "value"), FIELD_VALUES, ids=[repr(v) for v in FIELD_VALUES])
def test_field_checks_match_official(official: ModuleType, field: str, value: Any) -> None:
    """A value given for a field is accepted or rejected (TypeError) exactly
    when the official client accepts or rejects it, and stored the same way."""
    mine, theirs = example(ours), example(official)
    assert _outcome(lambda: mine(**{field: value})) == _outcome(lambda: theirs(**{field: value}))
    if _outcome(lambda: theirs(**{field: value})) == "ok":
        assert getattr(mine(**{field: value}), field) == getattr(theirs(**{field: value}), field)


def test_array_item_error_text_matches_official() -> None:
    """The wrong-item message is exact (schema_test.py test_schema_array_wrong_type)."""
    cls = rec(ours, "SomeSchema", some_field=ours.Array(ours.Integer(), required=False, default=[]))
    with pytest.raises(TypeError) as info:
        cls(some_field=["not", "integer"])
    assert str(info.value) == "Array field some_field items should all be of type int"


def test_sub_record_checks(official: ModuleType) -> None:
    """A sub-record field takes its record type (or a dict of its fields),
    and rejects other values and other record types, like the official."""
    for m in (ours, official):
        sub1 = rec(m, "SubRecord1", s=m.Integer())
        sub2 = rec(m, "SubRecord2", s=m.String())
        cls = rec(m, "E11", a=sub1)
        assert cls(a=sub1(s=1)).a.s == 1
        assert cls(a={"s": 2}).a.s == 2
        with pytest.raises(TypeError):
            cls(a=1)
        with pytest.raises(TypeError):
            cls(a=sub2(s="hello"))


def test_undeclared_fields(official: ModuleType) -> None:
    """Setting an undeclared attribute raises AttributeError; unknown
    constructor keywords are ignored (so data from newer writers decodes)."""
    for m in (ours, official):
        record: Any = rec(m, "Example", a=m.Integer(), b=m.Integer())(a=1, b=2, zz=3)
        record.b = 5
        assert (record.a, record.b) == (1, 5)
        with pytest.raises(AttributeError):
            record.c = 3
        assert not hasattr(record, "zz")


def test_base_record_cannot_be_instantiated() -> None:
    """Record itself has no fields (schema_test.py test_initialization accepts
    AttributeError or TypeError; ours is TypeError)."""
    with pytest.raises(TypeError):
        ours.Record(a=1, c=8)


def test_bad_default_fails_at_class_declaration() -> None:
    """A default of the wrong type is a TypeError where the field is declared
    (schema_test.py test_field_type_check_defaults)."""
    with pytest.raises(TypeError):
        rec(ours, "Example", a=ours.Integer(default="xyz"))


def test_bad_type_arguments_raise() -> None:
    """CustomEnum of a non-Enum and Array/Map of a non-field raise; the
    official raises a bare Exception, ours a TypeError (a subclass of it)."""
    with pytest.raises(TypeError):
        ours.CustomEnum(int)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        ours.Array(int)
    with pytest.raises(TypeError):
        ours.Map("string")


def test_defaults_and_unset_values(official: ModuleType) -> None:
    """Unset fields take their default; without one they are None, except
    Boolean (False) (schema_test.py test_defaults and test_none_value)."""
    for m in (ours, official):
        r: Any = rec(
            m, "Example", a=m.Integer(default=5), b=m.Integer(), c=m.String(default="hello")
        )()
        assert (r.a, r.b, r.c) == (5, None, "hello")
        kinds = ("Null", "Boolean", "Integer", "Long", "Float", "Double", "Bytes", "String")
        cls = rec(m, "AllNone", **{k.lower(): getattr(m, k)() for k in kinds})
        values = [getattr(cls(), k.lower()) for k in kinds]
        assert values == [None, False, None, None, None, None, None, None]


def test_default_value_on_json_round_trip() -> None:
    """schema_test.py test_default_value: required Boolean default and
    Double default survive a JSON round trip with unset fields."""
    cls = rec(
        ours,
        "MyRecord",
        A=ours.Integer(),
        B=ours.String(),
        C=ours.Boolean(default=True, required=True),
        D=ours.Double(default=6.4),
    )
    schema = ours.JsonSchema(cls)
    got: Any = schema.decode(schema.encode(cls(A=5, B="text")))
    assert (got.A, got.B, got.C, got.D) == (5, "text", True, 6.4)


def test_type_promotion_by_validate_type() -> None:
    """Field.validate_type converts like the official (schema_test.py
    test_type_promotion): int for double, str for bytes, bytes for str."""
    assert ours.Integer().validate_type("f", 20) == 20
    assert ours.Double().validate_type("f", 20) == 20.0
    assert ours.Double().validate_type("f", 20.0) == 20.0
    assert ours.Bytes().validate_type("f", "Test text1") == b"Test text1"
    assert ours.String().validate_type("f", b"Test text1") == "Test text1"


def test_enum_lookup() -> None:
    """An enum field takes a member, its name or its value (str values too),
    and rejects other enums' members and unknown names or values."""
    cls = rec(ours, "E8", a=Color)
    assert [cls(a=v).a for v in (Color.red, "red", 1)] == [Color.red] * 3
    for bad in ("redx", 5, OtherEnum.red):
        with pytest.raises(TypeError):
            cls(a=bad)


def test_mutable_defaults_are_not_shared() -> None:
    """Each record gets its own copy of a list/dict default and of an unset
    sub-record (the official client shares one object between records)."""
    sub = rec(ours, "Sub", x=ours.Integer())
    cls = rec(ours, "Holder", items=ours.Array(ours.Integer(), default=[]), sub=sub())
    first: Any = cls()
    second: Any = cls()
    first.items.append(1)
    first.sub.x = 9
    assert second.items == [] and second.sub.x is None


def test_subclass_inherits_parent_fields() -> None:
    """A Record subclass keeps its parent's fields, parents first (the
    official client drops them from the schema)."""
    base = rec(ours, "Base", _avro_namespace="ns", a=ours.Integer())
    child: Any = type("Child", (base,), {"b": ours.String()})
    assert [f["name"] for f in child.schema()["fields"]] == ["a", "b"]
    assert child.schema()["namespace"] == "ns"
    record: Any = child(a=1, b="x")
    assert (record.a, record.b) == (1, "x")


def test_records_compare_by_field_values() -> None:
    """Records are equal when their fields are; comparing with a non-record
    is simply unequal."""
    cls = rec(ours, "P", x=ours.Integer(), y=ours.Integer())
    assert cls(x=1, y=2) == cls(x=1, y=2)
    assert cls(x=1, y=2) != cls(x=1, y=3)
    assert cls(x=1) != 5
    assert repr(cls(x=1, y=2)) == "P(x=1, y=2)"


def test_array_and_map_take_record_and_enum_classes() -> None:
    """Array(RecordClass) and Map(EnumClass) mean Array(RecordClass()) and
    Map(CustomEnum(EnumClass)); an enum item type gets a full enum definition
    (the official writes the invalid type name "enum")."""
    item = rec(ours, "Item", n=ours.Integer())
    cls = rec(ours, "C", items=ours.Array(item), colors=ours.Map(Color))
    fields = cls.schema()["fields"]
    assert fields[0]["type"][1]["items"]["name"] == "Item"
    assert fields[1]["type"][1]["values"] == {
        "type": "enum",
        "name": "Color",
        "symbols": ["red", "green", "blue"],
    }
    record = cls(items=[{"n": 1}], colors={"k": Color.green})
    schema = ours.AvroSchema(cls)
    assert schema.decode(schema.encode(record)) == record
