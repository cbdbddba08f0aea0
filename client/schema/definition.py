"""Declaring message shapes: `Record` subclasses whose class attributes are
field types, and the Avro record schema such a class stands for.

    class Point(Record):
        x = Double()
        y = Double(required=True)

A Record class is a schema (`Point.schema()` gives the Avro definition that
both `AvroSchema` and `JsonSchema` register) and its instances are the values
sent. A Record *instance* declared inside another Record is a nested-record
field. The generated definitions follow the official `pulsar.schema` key for
key, since the broker compares what each client registers for a topic.
"""

from __future__ import annotations

import abc
import copy
from enum import Enum
from typing import Any, ClassVar

__all__ = [
    "Array",
    "Boolean",
    "Bytes",
    "CustomEnum",
    "Double",
    "Field",
    "Float",
    "Integer",
    "Long",
    "Map",
    "Null",
    "Record",
    "RecordMeta",
    "String",
]

# A field's Avro type: a primitive or already-defined name, a complex type
# object, or a union (list) of those.
AvroType = str | dict[str, Any] | list[Any]
PythonType = type | tuple[type, ...]

# Attributes every Record instance carries for its role as a field declaration;
# they are never record fields and never serialized.
_RESERVED = ("_default", "_required", "_required_default")


def _display_name(x: object) -> str:
    name = getattr(x, "__name__", None)
    return name if isinstance(name, str) else str(x)


def _copied_default(value: Any) -> Any:
    # Each record gets its own copy of a mutable default, so appending to one
    # record's list does not change every other record's.
    if isinstance(value, list | dict | Record):
        return copy.deepcopy(value)
    return value


class Field(abc.ABC):
    """Base of the field types. `required=True` drops the `null` branch from
    the field's Avro type; `required_default=True` writes `default` into the
    field's schema entry."""

    def __init__(
        self, default: Any = None, required: bool = False, required_default: bool = False
    ) -> None:
        self._required = required
        self._required_default = required_default
        self._default: Any = None
        if default is not None:
            # A default of the wrong type fails where the class is declared.
            default = self.validate_type("default", default)
        self._default = default

    @abc.abstractmethod
    def type(self) -> str:
        """The field's Avro type name."""

    @abc.abstractmethod
    def python_type(self) -> PythonType:
        """What a value of the field is in a record."""

    def validate_type(self, name: str, val: Any) -> Any:
        """`val` as stored in a record, or TypeError when it does not fit."""
        if val is None and not self._required:
            return self.default()
        expected = self.python_type()
        if not isinstance(val, expected):
            raise TypeError(
                f"Invalid type '{type(val)}' for field '{name}'. "
                f"Expected: {_display_name(expected)}"
            )
        return val

    def schema(self) -> AvroType:
        return self.schema_info(set())

    def schema_info(self, defined_names: set[str]) -> AvroType:
        """This field's Avro type; `defined_names` holds the named types
        already written out, which later uses refer to by name."""
        return self.type()

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default

    def __repr__(self) -> str:
        return f"{type(self).__name__}(default={self._default!r}, required={self._required})"


class Null(Field):
    def type(self) -> str:
        return "null"

    def python_type(self) -> PythonType:
        return type(None)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is not None:
            raise TypeError(f"Field {name} is of type Null and only takes None")
        return None


class Boolean(Field):
    def type(self) -> str:
        return "boolean"

    def python_type(self) -> PythonType:
        return bool

    def default(self) -> Any:
        # An unset boolean reads False, not None (as in the official client).
        return False if self._default is None else self._default


class Integer(Field):
    def type(self) -> str:
        return "int"

    def python_type(self) -> PythonType:
        return int


class Long(Field):
    def type(self) -> str:
        return "long"

    def python_type(self) -> PythonType:
        return int


class Float(Field):
    # An int is taken as is (not converted), so JSON writes it as the
    # official client does.
    def type(self) -> str:
        return "float"

    def python_type(self) -> PythonType:
        return (float, int)


class Double(Field):
    def type(self) -> str:
        return "double"

    def python_type(self) -> PythonType:
        return (float, int)


class Bytes(Field):
    """Takes bytes, or str (stored UTF-8 encoded)."""

    def type(self) -> str:
        return "bytes"

    def python_type(self) -> PythonType:
        return (bytes, str)

    def validate_type(self, name: str, val: Any) -> Any:
        if isinstance(val, str):
            return val.encode()
        if isinstance(val, bytearray | memoryview):
            return bytes(val)
        return super().validate_type(name, val)


class String(Field):
    """Takes str, or bytes (stored decoded from UTF-8)."""

    def type(self) -> str:
        return "string"

    def python_type(self) -> PythonType:
        return (str, bytes)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if isinstance(val, bytes):
            return val.decode()
        if not isinstance(val, str):
            raise TypeError(f"Invalid type '{type(val)}' for field '{name}'. Expected a string")
        return val


class CustomEnum(Field):
    """A field holding members of a Python Enum; Avro writes the member's
    name. A Record attribute set to an Enum class means the same thing."""

    def __init__(
        self,
        enum_type: type[Enum],
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        if not (isinstance(enum_type, type) and issubclass(enum_type, Enum)):
            raise TypeError(f"{_display_name(enum_type)} is not a valid Enum type")
        self.enum_type = enum_type
        # Member by value, for values sent as their value (JSON does).
        self.values: dict[Any, Enum] = {m.value: m for m in enum_type.__members__.values()}
        super().__init__(default, required, required_default)

    def type(self) -> str:
        return "enum"

    def python_type(self) -> PythonType:
        return self.enum_type

    def member(self, val: object) -> Enum | None:
        """The member `val` names: a member itself, its name (as Avro
        writes it) or its value (as JSON writes it); None if none."""
        if isinstance(val, self.enum_type):
            return val
        if isinstance(val, Enum):
            return None  # another enum's member, even if it is also a str or int
        if isinstance(val, str) and val in self.enum_type.__members__:
            return self.enum_type.__members__[val]
        # bool is excluded: True is not the member whose value is 1.
        if isinstance(val, str) or type(val) is int:
            return self.values.get(val)
        return None

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        found = self.member(val)
        if found is not None:
            return found
        if isinstance(val, str):
            expected: object = list(self.enum_type.__members__)
        elif type(val) is int:
            expected = list(self.values)
        else:
            raise TypeError(
                f"Invalid type '{type(val)}' for field '{name}'. "
                f"Expected: {_display_name(self.enum_type)}"
            )
        raise TypeError(f"Invalid enum value '{val}' for field '{name}'. Expected: {expected}")

    def schema_info(self, defined_names: set[str]) -> AvroType:
        # Enums are named by their bare class name, as the official client does.
        name = self.enum_type.__name__
        if name in defined_names:
            return name
        defined_names.add(name)
        return {
            "type": "enum",
            "name": name,
            "symbols": [member.name for member in self.enum_type],
        }


def _as_item_type(x: object) -> Field | Record:
    """The element type of an Array or Map: whatever a Record class body
    accepts as a field (a field, a record instance, a Record or Enum class)."""
    declared = _field_from_attribute(x)
    if declared is None:
        raise TypeError(f"Argument {_display_name(x)} is not a Record or a Field")
    return declared


class Array(Field):
    def __init__(
        self,
        array_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.array_type = _as_item_type(array_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def type(self) -> str:
        return "array"

    def python_type(self) -> PythonType:
        return list

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        item_type = self.array_type.python_type()
        for item in val:
            if not isinstance(item, item_type):
                # This exact text is checked by the official test suite.
                raise TypeError(
                    f"Array field {name} items should all be of type {self.array_type.type()}"
                )
        return val

    def schema_info(self, defined_names: set[str]) -> AvroType:
        return {"type": "array", "items": self.array_type.schema_info(defined_names)}


class Map(Field):
    """A map with str keys (Avro maps have no other key type)."""

    def __init__(
        self,
        value_type: Any,
        default: Any = None,
        required: bool = False,
        required_default: bool = False,
    ) -> None:
        self.value_type = _as_item_type(value_type)
        super().__init__(default=default, required=required, required_default=required_default)

    def type(self) -> str:
        return "map"

    def python_type(self) -> PythonType:
        return dict

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None:
            return None
        super().validate_type(name, val)
        value_type = self.value_type.python_type()
        for key, item in val.items():
            if not isinstance(key, str):
                raise TypeError(f"Map field {name} takes only str keys, not {type(key)}")
            if not isinstance(item, value_type):
                raise TypeError(
                    f"Map field {name} values should all be of type {_display_name(value_type)}"
                )
        return val

    def schema_info(self, defined_names: set[str]) -> AvroType:
        return {"type": "map", "values": self.value_type.schema_info(defined_names)}


def _from_plain(field: Field | Record, value: Any) -> Any:
    """Build nested records out of the dicts a decoder (or a caller) gives
    for them, at any depth of arrays and maps. Anything else passes through."""
    if isinstance(field, Record):
        if isinstance(value, dict):
            return type(field)(**value)
        return value
    if isinstance(field, CustomEnum):
        found = field.member(value)
        return value if found is None else found
    if isinstance(field, Array) and isinstance(value, list):
        items = [_from_plain(field.array_type, item) for item in value]
        unchanged = all(a is b for a, b in zip(items, value, strict=True))
        return value if unchanged else items
    if isinstance(field, Map) and isinstance(value, dict):
        entries = {k: _from_plain(field.value_type, v) for k, v in value.items()}
        unchanged = all(entries[k] is v for k, v in value.items())
        return value if unchanged else entries
    return value


def _field_from_attribute(value: object) -> Field | Record | None:
    """What a class attribute of a Record declares, or None if not a field."""
    # Record instances are recognized by their metaclass: this also runs
    # while the Record class itself is being made, before the name exists.
    if isinstance(value, Field) or isinstance(type(value), RecordMeta):
        return value  # type: ignore[return-value]
    if isinstance(value, type) and issubclass(value, Enum):
        return CustomEnum(value)
    if isinstance(value, RecordMeta):
        # A Record class stands for a nested record with default settings.
        instance: Record = value()
        return instance
    return None


def _avro_default(value: Any) -> Any:
    """A default value as written in an Avro schema (JSON)."""
    if isinstance(value, Enum):
        return value.name
    if isinstance(value, bytes):
        # Avro's JSON form of bytes: one code point per byte.
        return value.decode("latin-1")
    if isinstance(value, Record):
        return {name: _avro_default(getattr(value, name)) for name in value._fields}
    if isinstance(value, list):
        return [_avro_default(v) for v in value]
    if isinstance(value, dict):
        return {k: _avro_default(v) for k, v in value.items()}
    return value


class RecordMeta(type):
    """Collects a Record class's field declarations into `_fields`, parents'
    first, in declaration order."""

    _fields: dict[str, Field | Record]

    def __new__(
        mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any], **kwargs: Any
    ) -> RecordMeta:
        cls = super().__new__(mcs, name, bases, namespace, **kwargs)
        fields: dict[str, Field | Record] = {}
        for base in reversed(cls.__mro__[1:]):
            fields.update(base.__dict__.get("_fields", {}))
        for attr, value in namespace.items():
            declared = _field_from_attribute(value)
            if declared is not None:
                fields[attr] = declared
        cls._fields = fields
        return cls


class Record(metaclass=RecordMeta):
    """Base of application records. Subclass it with field declarations.

    Class settings: `_avro_namespace` (the Avro record's namespace) and
    `_sorted_fields` (list fields alphabetically in the schema rather than in
    declaration order).

    An instance is either a value (keyword arguments set fields; fields not
    given take their defaults; unknown keywords are ignored, which lets a
    reader decode data written with more fields) or, placed in another
    Record's class body, the declaration of a nested-record field, configured
    by `default`, `required` and `required_default`.
    """

    _avro_namespace: ClassVar[str | None] = None
    _sorted_fields: ClassVar[bool] = False
    _fields: ClassVar[dict[str, Field | Record]]

    _default: Any = None
    _required: bool = False
    _required_default: bool = False

    def __init__(
        self,
        default: Any = None,
        required_default: bool = False,
        required: bool = False,
        **kwargs: Any,
    ) -> None:
        if type(self) is Record:
            raise TypeError("Record is a base class: declare a subclass with fields")
        object.__setattr__(self, "_required_default", required_default)
        object.__setattr__(self, "_default", default)
        object.__setattr__(self, "_required", required)
        for name, field in self._fields.items():
            if name in kwargs:
                setattr(self, name, kwargs[name])
            elif isinstance(field, Record):
                # An unset nested record is an empty record rather than None,
                # which is what the official client writes.
                object.__setattr__(self, name, copy.deepcopy(field))
            else:
                # Defaults were checked when the class was declared.
                object.__setattr__(self, name, _copied_default(field.default()))

    def __setattr__(self, key: str, value: Any) -> None:
        if key in _RESERVED:
            object.__setattr__(self, key, value)
            return
        field = self._fields.get(key)
        if field is None:
            raise AttributeError(f"Cannot set undeclared field {key} on record")
        object.__setattr__(self, key, field.validate_type(key, _from_plain(field, value)))

    def __getattr__(self, name: str) -> Any:
        # Only reached when an attribute is missing; declared so that type
        # checkers accept field access on records.
        raise AttributeError(f"{type(self).__name__!r} record has no attribute {name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Record):
            return NotImplemented
        missing = object()
        return all(getattr(self, name) == getattr(other, name, missing) for name in self._fields)

    __hash__ = None  # type: ignore[assignment]  # mutable, compared by value

    def __repr__(self) -> str:
        values = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields)
        return f"{type(self).__name__}({values})"

    __str__ = __repr__

    @classmethod
    def schema(cls) -> dict[str, Any]:
        """The Avro schema of this record, as a JSON-ready dict."""
        definition = cls.schema_info(set())
        assert isinstance(definition, dict)  # a fresh name set always defines it
        return definition

    @classmethod
    def schema_info(cls, defined_names: set[str]) -> AvroType:
        """This record's Avro type: its full definition the first time its
        name is met, the (namespace-qualified) name after that."""
        namespace = cls._avro_namespace
        full_name = cls.__name__ if namespace is None else f"{namespace}.{cls.__name__}"
        if full_name in defined_names:
            return full_name
        defined_names.add(full_name)

        definition: dict[str, Any] = {"type": "record", "name": cls.__name__}
        if namespace is not None:
            definition["namespace"] = namespace
        names = sorted(cls._fields) if cls._sorted_fields else list(cls._fields)
        fields: list[dict[str, Any]] = []
        for name in names:
            field = cls._fields[name]
            field_type = field.schema_info(defined_names)
            if not field._required:
                field_type = ["null", field_type]
            entry: dict[str, Any] = {"name": name}
            if field.required_default():
                entry["default"] = _avro_default(field.default())
            entry["type"] = field_type
            fields.append(entry)
        definition["fields"] = fields
        return definition

    # The same methods as Field, for a Record instance used as a field.

    def type(self) -> str:
        return type(self).__name__

    def python_type(self) -> PythonType:
        return type(self)

    def validate_type(self, name: str, val: Any) -> Any:
        if val is None and not self._required:
            return self.default()
        if not isinstance(val, type(self)):
            raise TypeError(
                f"Invalid type '{type(val)}' for sub-record field '{name}'. "
                f"Expected: {type(self).__name__}"
            )
        return val

    def default(self) -> Any:
        return self._default

    def required_default(self) -> bool:
        return self._required_default
