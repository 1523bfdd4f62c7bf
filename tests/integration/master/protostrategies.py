"""Hypothesis strategies for any protobuf message, driven by its descriptor: every field may
be missing or hold an extreme value of its type (range limits, NaN and infinities, empty,
huge, control-character and non-ASCII text, enum numbers no .proto names, huge repeated
fields), and nested messages recurse."""

from __future__ import annotations

import math
from typing import Any, Literal, TypeVar

from google.protobuf.descriptor import FieldDescriptor
from google.protobuf.message import Message
from google.protobuf.message_factory import GetMessageClass
from hypothesis import strategies as st

M = TypeVar("M", bound=Message)

# Nested messages deeper than this are left empty: JobSpec and the worker reports are flat.
MAX_DEPTH = 3
HUGE_TEXT = (300, 5_000, 70_000, 1_000_000)
# Large enough to find per-item costs and limits, small enough to keep a run short.
HUGE_SCALAR_LISTS = (1_000, 20_000)
HUGE_MESSAGE_LISTS = (200, 1_000)

_T = FieldDescriptor
# Descriptors are typed loosely: the upb and pure-Python classes differ, and optional parts
# (a field's enum or message type) are there exactly when its type says so.
Descriptor = Any
Field = Any


def _ints(low: int, high: int) -> st.SearchStrategy[int]:
    edges = sorted({low, low + 1, -1 if low < 0 else 0, 0, 1, high - 1, high})
    return st.one_of(st.sampled_from(edges), st.integers(low, high))


SPECIAL_TEXT = (
    "",
    " ",
    "\t",
    "\x00",
    "a\x00b",
    "\n\r",
    "\x1b[31m",
    "é",
    "日本",
    "😀",
    "\u202e",
    "\ufeff",
    "../../etc/passwd",
    "/",
    "-1",
    "NaN",
)


def text(small: bool = False) -> st.SearchStrategy[str]:
    if small:
        return st.one_of(st.sampled_from(SPECIAL_TEXT), st.text(max_size=8))
    huge = st.builds(
        lambda unit, n: unit * n,
        st.sampled_from(["a", "é", "\x00", " ", "😀"]),
        st.sampled_from(HUGE_TEXT),
    )
    return st.one_of(st.sampled_from(SPECIAL_TEXT), st.text(max_size=40), huge)


def floats(width: Literal[32, 64]) -> st.SearchStrategy[float]:
    edges = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1e-300, -1.0, 1e308, -1e308, 5e-324]
    if width == 32:
        edges = [x for x in edges if not math.isfinite(x) or abs(x) < 3e38]
    return st.one_of(st.sampled_from(edges), st.floats(width=width))


def scalars(field: Field, small: bool = False) -> st.SearchStrategy[Any]:
    kind = field.type
    if kind in (_T.TYPE_INT32, _T.TYPE_SINT32, _T.TYPE_SFIXED32):
        return _ints(-(2**31), 2**31 - 1)
    if kind in (_T.TYPE_INT64, _T.TYPE_SINT64, _T.TYPE_SFIXED64):
        return _ints(-(2**63), 2**63 - 1)
    if kind in (_T.TYPE_UINT32, _T.TYPE_FIXED32):
        return _ints(0, 2**32 - 1)
    if kind in (_T.TYPE_UINT64, _T.TYPE_FIXED64):
        return _ints(0, 2**64 - 1)
    if kind == _T.TYPE_DOUBLE:
        return floats(64)
    if kind == _T.TYPE_FLOAT:
        return floats(32)
    if kind == _T.TYPE_BOOL:
        return st.booleans()
    if kind == _T.TYPE_STRING:
        return text(small)
    if kind == _T.TYPE_BYTES:
        return st.one_of(st.binary(max_size=40), text(small).map(str.encode))
    if kind == _T.TYPE_ENUM:
        named = [v.number for v in field.enum_type.values]
        return st.one_of(st.sampled_from(named), _ints(-(2**31), 2**31 - 1))
    raise TypeError(f"no strategy for field {field.full_name} of type {kind}")


def _values(field: Field, depth: int, small: bool) -> st.SearchStrategy[Any]:
    if field.type == _T.TYPE_MESSAGE:
        return messages(field.message_type, depth + 1, small)
    return scalars(field, small)


def _repeated(field: Field, depth: int, small: bool) -> st.SearchStrategy[list[Any]]:
    few = st.lists(_values(field, depth, small), max_size=4)
    if small:
        return few
    # Many copies of one small item: a huge list, never a huge list of huge items.
    sizes = HUGE_MESSAGE_LISTS if field.type == _T.TYPE_MESSAGE else HUGE_SCALAR_LISTS
    huge = st.builds(
        lambda one, n: [one] * n, _values(field, depth, small=True), st.sampled_from(sizes)
    )
    return st.one_of(few, huge)


def _maps(field: Field, depth: int, small: bool) -> st.SearchStrategy[dict[Any, Any]]:
    entry = field.message_type
    key = scalars(entry.fields_by_name["key"], small)
    value = _values(entry.fields_by_name["value"], depth, small)
    return st.dictionaries(key, value, max_size=4)


def _is_map(field: Field) -> bool:
    return bool(
        field.type == _T.TYPE_MESSAGE
        and field.message_type.GetOptions().map_entry
        and field.is_repeated
    )


def _field(field: Field, depth: int, small: bool = False) -> st.SearchStrategy[Any]:
    if _is_map(field):
        return _maps(field, depth, small)
    if field.is_repeated:
        return _repeated(field, depth, small)
    return _values(field, depth, small)


def _build(descriptor: Descriptor, values: dict[str, Any]) -> Message:
    message = GetMessageClass(descriptor)()
    for name, value in values.items():
        field = descriptor.fields_by_name[name]
        target = getattr(message, name)
        if _is_map(field):
            for key, item in value.items():
                if isinstance(item, Message):
                    target[key].CopyFrom(item)
                else:
                    target[key] = item
        elif field.is_repeated:
            target.extend(value)
        elif field.type == _T.TYPE_MESSAGE:
            target.CopyFrom(value)
        else:
            setattr(message, name, value)
    return message


def _lazy(field: Field, depth: int, small: bool) -> st.SearchStrategy[Any]:
    """The field's strategy, built on first use (message types may nest themselves)."""

    def build() -> st.SearchStrategy[Any]:
        return _field(field, depth, small)

    return st.deferred(build)


def messages(
    descriptor: Descriptor, depth: int = 0, small: bool = False
) -> st.SearchStrategy[Message]:
    """Messages of `descriptor`'s type, any subset of their fields set (`small`: no huge
    text or lists anywhere inside)."""
    if depth > MAX_DEPTH:
        return st.just(GetMessageClass(descriptor)())
    optional: dict[str, st.SearchStrategy[Any]] = {
        f.name: _lazy(f, depth, small) for f in descriptor.fields
    }
    return st.fixed_dictionaries({}, optional=optional).map(
        lambda values: _build(descriptor, values)
    )


def of(message_class: type[M]) -> st.SearchStrategy[M]:
    """Messages of `message_class`, typed as such."""
    return messages(message_class.DESCRIPTOR)  # type: ignore[return-value]


def around(base: M) -> st.SearchStrategy[M]:
    """`base` (a valid message) with a random message of its type merged over it: mostly
    valid requests with a few fields made extreme, to get past the first check."""

    def merged(overlay: Any) -> M:
        out = type(base)()
        out.CopyFrom(base)
        out.MergeFrom(overlay)
        return out

    descriptor: Descriptor = base.DESCRIPTOR
    one_field = st.sampled_from(list(descriptor.fields)).flatmap(
        lambda f: _field(f, 0).map(lambda value: _build(descriptor, {f.name: value}))
    )
    return st.one_of(one_field, messages(descriptor)).map(merged)
