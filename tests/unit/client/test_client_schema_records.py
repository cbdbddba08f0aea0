"""Record schemas (Avro and JSON) against the official `pulsar.schema`.

The broker stores the definition a producer registers and compares it with
what other clients register, and consumers of either client decode the other's
payloads. So for the same Record shape declared through both modules, the
definitions must be equal (dict and registered text) and the encoded payloads
byte-identical; each side must also decode the other's bytes.

Record classes are built with `type()` so one declaration serves both modules.
"""

from __future__ import annotations

import json
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


class Size(Enum):
    SMALL = "s"
    LARGE = "l"


@pytest.fixture(scope="module")
def official() -> Any:
    return pytest.importorskip("pulsar.schema")


def rec(m: Any, name: str, **attrs: Any) -> Any:
    """A Record subclass of module `m` with class attributes `attrs`, in order."""
    return type(name, (m.Record,), attrs)


# Each shape builds (Record class, sample instances) from a schema module.
Shape = Callable[[Any], tuple[Any, list[Any]]]


def primitives(m: Any) -> tuple[Any, list[Any]]:
    cls = rec(
        m,
        "Primitives",
        n=m.Null(),
        b=m.Boolean(),
        i=m.Integer(),
        l=m.Long(),
        f=m.Float(),
        d=m.Double(),
        by=m.Bytes(),
        s=m.String(),
    )
    return cls, [
        cls(),
        cls(b=True, i=-7, l=2**40, f=1.5, d=-0.25, by=b"\x00\x7f", s="héllo ✓"),
        # Promotions: int into float fields, str into bytes, bytes into str.
        cls(f=3, d=4, by="text", s=b"raw"),
    ]


def required_fields(m: Any) -> tuple[Any, list[Any]]:
    sub = rec(m, "RequiredSub", x=m.Integer(required=True), z=m.String())
    cls = rec(
        m,
        "RequiredExample",
        a=m.String(required=True),
        flag=m.Boolean(required=True),
        sub=sub(required=True),
    )
    return cls, [cls(a="x", flag=True, sub=sub(x=3)), cls(a="", sub=sub(x=0, z="z"))]


def required_defaults(m: Any) -> tuple[Any, list[Any]]:
    # The official suite's test_avro_required_default shape.
    sub = rec(m, "MySubRecord", _sorted_fields=True, x=m.Integer(), y=m.Long(), z=m.String())
    cls = rec(
        m,
        "ExampleRequiredDefault",
        _sorted_fields=True,
        a=m.Integer(required_default=True),
        b=m.Boolean(required=True, required_default=True),
        c=m.Long(required_default=True),
        d=m.Float(required_default=True),
        e=m.Double(required_default=True),
        f=m.String(required_default=True),
        g=m.Bytes(required_default=True),
        h=m.Array(m.String(), required_default=True),
        i=m.Map(m.String(), required_default=True),
        j=sub(required_default=True),
        k=m.Integer(default=5, required_default=True),
        col=m.CustomEnum(Color, required=True, default=Color.green, required_default=True),
    )
    return cls, [cls(), cls(a=1, b=True, h=["q"], i={"k": "v"}, j=sub(x=1, y=2, z="3"))]


def enums(m: Any) -> tuple[Any, list[Any]]:
    cls = rec(
        m,
        "Enums",
        _sorted_fields=True,
        a=m.String(),
        d=Color,
        j=m.CustomEnum(Color),
        x=m.CustomEnum(Color, required=True, default=Color.blue, required_default=True),
    )
    return cls, [cls(), cls(a="v", d=Color.green, j="red"), cls(d=3, j=Color.blue, x=Color.red)]


def containers(m: Any) -> tuple[Any, list[Any]]:
    cls = rec(
        m,
        "Containers",
        strings=m.Array(m.String()),
        ints=m.Map(m.Integer()),
        map_array=m.Map(m.Array(m.Integer())),
        map_map=m.Map(m.Map(m.Integer())),
        array_map=m.Array(m.Map(m.Integer())),
        array_array=m.Array(m.Array(m.Integer())),
        doubles=m.Array(m.Double(), required=True, default=[]),
    )
    return cls, [
        cls(),
        cls(
            strings=["a", "b"],
            ints={"x": 1},
            map_array={"A": [1, 2], "B": [3]},
            map_map={"A": {"B": 2}},
            array_map=[{"A": 1}, {"B": 2}],
            array_array=[[1, 2, 3], [4]],
            doubles=[1.5, 2],
        ),
    ]


def nested(m: Any) -> tuple[Any, list[Any]]:
    # The official suite's test_serialize_schema_complex shape: repeated
    # records and enums become name references, namespaces qualify them.
    obj1 = rec(m, "NestedObj1", _sorted_fields=True, na1=m.String(), nb1=m.Double())
    obj2 = rec(m, "NestedObj2", _sorted_fields=True, na2=m.Integer(), nb2=m.Boolean(), nc2=obj1())
    obj3 = rec(m, "NestedObj3", _sorted_fields=True, color=m.CustomEnum(Color), na3=m.Integer())
    obj4 = rec(
        m,
        "NestedObj4",
        _avro_namespace="xxx4",
        _sorted_fields=True,
        na4=m.String(),
        nb4=m.Integer(),
    )
    cls = rec(
        m,
        "ComplexRecord",
        _avro_namespace="xxx.xxx",
        _sorted_fields=True,
        a=m.Integer(),
        b=m.Integer(),
        color=Color,
        color2=Color,
        color3=m.CustomEnum(Color, required=True, default=Color.red, required_default=True),
        nested=obj2(),
        nested2=obj2,
        mapNested=m.Map(obj3()),
        mapNested2=m.Map(obj3()),
        arrayNested=m.Array(obj4()),
        arrayNested2=m.Array(obj4()),
    )
    inner = obj2(na2=22, nb2=True, nc2=obj1(na1="na1 value", nb1=20.5))
    full = cls(
        a=1,
        b=2,
        color=Color.red,
        color2=Color.blue,
        nested=inner,
        nested2=inner,
        mapNested={"a": obj3(na3=1, color=Color.green), "b": obj3(na3=2)},
        mapNested2={"d": obj3(na3=4, color=Color.red)},
        arrayNested=[obj4(na4="value 1", nb4=100), obj4(na4="value 2", nb4=200)],
        arrayNested2=[obj4(na4="value 3", nb4=300)],
    )
    # An unset nested record is written as an empty record, not null.
    return cls, [full, cls(a=1), cls(nested=obj2(na2=1, nb2=True))]


def str_valued_enum(m: Any) -> tuple[Any, list[Any]]:
    cls = rec(m, "Sized", size=Size, sizes=m.Map(m.String()))
    return cls, [cls(size=Size.LARGE, sizes={"k": "v"}), cls(size="SMALL")]


SHAPES: dict[str, Shape] = {
    "primitives": primitives,
    "required": required_fields,
    "required_default": required_defaults,
    "enums": enums,
    "containers": containers,
    "nested": nested,
    "str_enum": str_valued_enum,
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=list(SHAPES))
def test_record_definition_matches_official(official: ModuleType, shape: Shape) -> None:
    """Record.schema() gives the same Avro definition dict as pulsar.schema
    for the same declaration (field order, unions with null, defaults,
    named-type references, namespaces)."""
    mine, _ = shape(ours)
    theirs, _ = shape(official)
    assert mine.schema() == theirs.schema()
    assert json.dumps(mine.schema()) == json.dumps(theirs.schema()), "same key order"


@pytest.mark.parametrize("kind", ["JsonSchema", "AvroSchema"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=list(SHAPES))
def test_registered_schema_matches_official(official: ModuleType, shape: Shape, kind: str) -> None:
    """What a producer registers (schema_info: type, name, definition text)
    is what the official client registers, so the broker sees one schema."""
    mine = getattr(ours, kind)(shape(ours)[0]).schema_info()
    theirs = getattr(official, kind)(shape(official)[0]).schema_info()
    assert mine.schema_type() == int(theirs.schema_type())
    assert mine.name() == theirs.name()
    assert mine.schema() == theirs.schema()
    assert mine.schema_data() == theirs.schema().encode()
    assert mine.properties() == {}


# The official client cannot decode its own JSON for an enum with str values
# (it writes the value, then looks it up as a name); we can.
OFFICIAL_JSON_DECODE_FAILS = {str_valued_enum}


@pytest.mark.parametrize("kind", ["JsonSchema", "AvroSchema"])
@pytest.mark.parametrize("shape", SHAPES.values(), ids=list(SHAPES))
def test_payloads_match_official_both_ways(official: ModuleType, shape: Shape, kind: str) -> None:
    """encode() writes the official client's bytes for the same record, and
    each client decodes the other's payload to an equal record."""
    check_theirs = not (kind == "JsonSchema" and shape in OFFICIAL_JSON_DECODE_FAILS)
    my_cls, my_records = shape(ours)
    their_cls, their_records = shape(official)
    my_schema = getattr(ours, kind)(my_cls)
    their_schema = getattr(official, kind)(their_cls)
    for mine, theirs in zip(my_records, their_records, strict=True):
        data = my_schema.encode(mine)
        assert data == their_schema.encode(theirs)
        decoded = my_schema.decode(data)
        assert type(decoded) is my_cls
        assert decoded == mine
        if check_theirs:
            assert their_schema.decode(data) == theirs


@pytest.mark.parametrize("shape", SHAPES.values(), ids=list(SHAPES))
def test_instances_hold_the_same_values_as_official(official: ModuleType, shape: Shape) -> None:
    """Constructor defaults and conversions (enum by name/value, str<->bytes,
    unset booleans False, unset sub-records empty) give the official values."""

    def plain(value: Any) -> Any:
        if hasattr(value, "_fields"):
            return {name: plain(getattr(value, name)) for name in value._fields}
        if isinstance(value, list):
            return [plain(v) for v in value]
        if isinstance(value, dict):
            return {k: plain(v) for k, v in value.items()}
        return value

    for mine, theirs in zip(shape(ours)[1], shape(official)[1], strict=True):
        assert plain(mine) == plain(theirs)


def test_official_suite_simple_definition() -> None:
    """schema_test.py test_simple: sorted fields, an Enum class and a
    CustomEnum of the same enum (second use is a name reference)."""
    cls = rec(
        ours,
        "Example",
        _sorted_fields=True,
        a=ours.String(),
        b=ours.Integer(),
        c=ours.Array(ours.String()),
        d=Color,
        e=ours.Boolean(),
        f=ours.Float(),
        g=ours.Double(),
        h=ours.Bytes(),
        i=ours.Map(ours.String()),
        j=ours.CustomEnum(Color),
    )
    enum_def = {"type": "enum", "name": "Color", "symbols": ["red", "green", "blue"]}
    assert cls.schema() == {
        "name": "Example",
        "type": "record",
        "fields": [
            {"name": "a", "type": ["null", "string"]},
            {"name": "b", "type": ["null", "int"]},
            {"name": "c", "type": ["null", {"type": "array", "items": "string"}]},
            {"name": "d", "type": ["null", enum_def]},
            {"name": "e", "type": ["null", "boolean"]},
            {"name": "f", "type": ["null", "float"]},
            {"name": "g", "type": ["null", "double"]},
            {"name": "h", "type": ["null", "bytes"]},
            {"name": "i", "type": ["null", {"type": "map", "values": "string"}]},
            {"name": "j", "type": ["null", "Color"]},
        ],
    }


def test_field_order_declared_or_sorted() -> None:
    """Fields keep declaration order unless _sorted_fields is set, which
    makes two declarations in different orders register the same schema."""
    t1 = rec(ours, "T", a=ours.Integer(), b=ours.Integer())
    t2 = rec(ours, "T", b=ours.Integer(), a=ours.Integer())
    assert t1.schema() != t2.schema()
    s1 = rec(ours, "T", _sorted_fields=True, a=ours.Integer(), b=ours.Integer())
    s2 = rec(ours, "T", _sorted_fields=True, b=ours.Integer(), a=ours.Integer())
    assert s1.schema() == s2.schema()


def test_non_enum_class_attribute_is_not_a_field() -> None:
    """A plain class with constants (not an Enum) is not a field
    (schema_test.py test_invalid_enum)."""

    class NotAnEnum:
        red = 1

    cls = rec(ours, "InvalidEnum", a=ours.Integer(), b=NotAnEnum)
    assert cls.schema() == {
        "name": "InvalidEnum",
        "type": "record",
        "fields": [{"name": "a", "type": ["null", "int"]}],
    }


def test_json_payload_is_stable_and_has_no_reserved_keys() -> None:
    """Encoding twice gives the same bytes (pulsar_test test_json_schema_encode)
    and the record's own settings (_default, _required...) never appear."""
    sub = rec(ours, "SchemaB", field=ours.String(required=True))
    cls = rec(ours, "SchemaA", field=sub())
    schema = ours.JsonSchema(cls)
    record = cls(field=sub(field="something"))
    data = schema.encode(record)
    assert data == schema.encode(record)
    assert b"_default" not in data and b"_required" not in data
    assert json.loads(data) == {"field": {"field": "something"}}


def test_json_writes_enum_values_and_reads_names_or_values() -> None:
    """JSON carries an enum's value (as the official client writes); decoding
    takes values, and names as written by other Pulsar clients."""
    cls = rec(ours, "E", c=Color, s=Size)
    schema = ours.JsonSchema(cls)
    assert json.loads(schema.encode(cls(c=Color.blue, s=Size.LARGE))) == {"c": 3, "s": "l"}
    decoded: Any = schema.decode(b'{"c": "green", "s": "l"}')
    assert (decoded.c, decoded.s) == (Color.green, Size.LARGE)


def test_json_decode_ignores_unknown_fields_and_defaults_missing_ones() -> None:
    """A JSON payload written by a newer or older record version decodes:
    extra keys are dropped, missing fields take their defaults."""
    cls = rec(ours, "V", a=ours.Integer(default=5), b=ours.String())
    decoded: Any = ours.JsonSchema(cls).decode(b'{"b": "x", "added_later": 1}')
    assert (decoded.a, decoded.b) == (5, "x")


def test_avro_round_trip_of_nested_containers_of_records() -> None:
    """Records inside maps of arrays (any depth) come back as records,
    which the official client only does one level deep."""
    item = rec(ours, "Item", n=ours.Integer())
    cls = rec(ours, "Holder", groups=ours.Map(ours.Array(item())))
    record = cls(groups={"a": [item(n=1), item(n=2)], "b": []})
    for kind in (ours.AvroSchema, ours.JsonSchema):
        schema = kind(cls)
        decoded: Any = schema.decode(schema.encode(record))
        assert decoded == record
        assert type(decoded.groups["a"][0]) is item


def test_schema_type_promotion_round_trip() -> None:
    """schema_test.py test_schema_type_promotion: str given for bytes and
    bytes for str are converted, int for float kept, through both schemas."""
    cls = rec(
        ours,
        "ExampleRecord",
        str_field=ours.String(),
        int_field=ours.Integer(),
        float_field=ours.Float(),
        bytes_field=ours.Bytes(),
    )
    sent: Any = cls(str_field=b"test", int_field=1, float_field=3, bytes_field="str")
    assert (sent.str_field, sent.bytes_field) == ("test", b"str")
    for kind in (ours.AvroSchema, ours.JsonSchema):
        schema = kind(cls)
        got: Any = schema.decode(schema.encode(sent))
        assert (got.str_field, got.int_field, got.float_field, got.bytes_field) == (
            "test",
            1,
            3,
            b"str",
        )


def test_bytes_fields_avro_any_bytes_json_utf8_only(official: ModuleType) -> None:
    """Avro carries any bytes; JSON writes bytes fields as text, so non-UTF-8
    bytes fail to encode with UnicodeDecodeError, as in the official client."""
    mine = rec(ours, "B", by=ours.Bytes())
    theirs = rec(official, "B", by=official.Bytes())
    raw = b"\x00\xff\xfe"
    data = ours.AvroSchema(mine).encode(mine(by=raw))
    assert data == official.AvroSchema(theirs).encode(theirs(by=raw))
    decoded: Any = ours.AvroSchema(mine).decode(data)
    assert decoded.by == raw
    for module, cls in ((ours, mine), (official, theirs)):
        with pytest.raises(UnicodeDecodeError):
            module.JsonSchema(cls).encode(cls(by=raw))
