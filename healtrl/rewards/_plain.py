"""Plain-data wire format between the sandboxed candidate and the judge of assert-style code tests.

Only plain data crosses: None, bool, int, float, str, bytes, and lists, tuples, dicts, sets and frozensets of plain
data. Values of any other type, subclasses included (an `int` subclass whose `__eq__` is always true), are refused by
`encode`; `decode` builds nothing but those types from JSON, so whatever bytes the candidate's process writes, the
judge only ever holds values whose comparisons are Python's own.

Encoding (JSON): None, bool, str, float (NaN and infinities as JSON's non-standard `NaN`/`Infinity`, which Python's
`json` reads back exactly) and ints below 2**63 in magnitude are themselves; lists are arrays; every other value is
a one-key object: {"i": hex} (larger ints: hexadecimal converts in linear time, decimal does not), {"t": [...]}
tuple, {"d": [[key, value], ...]} dict, {"s": [...]} set, {"f": [...]} frozenset, {"b": hex} bytes.

This file is stdlib-only: it is also copied into the sandboxes and imported there.
"""

from __future__ import annotations

import json
import os

MAX_DEPTH = 64
"""Nesting depth refused beyond this (containers inside containers), on both sides."""

MAX_FRAME_BYTES = 64 << 20
"""A message larger than this is refused by `read_frame` (the judge fails the test instead of reading it)."""

_SMALL_INT = 1 << 63
_TAGS = ("i", "t", "d", "s", "f", "b")


class PlainDataError(ValueError):
    """A value is not plain data, or a message is not a valid encoding of plain data."""


def _numpy_scalar(value):
    """A numpy scalar as the Python number/str/bool it holds (numpy is imported only by the candidate, if at all)."""
    cls = type(value)
    if cls.__module__ == "numpy" and hasattr(value, "item") and getattr(value, "shape", None) == ():
        item = value.item()
        if type(item) in (bool, int, float, str):
            return item
    raise PlainDataError(f"{cls.__module__}.{cls.__qualname__} is not plain data")


def encode(value, depth: int = 0):
    """`value` as JSON-ready data, or `PlainDataError` when it is not plain data (exact types only)."""
    if depth > MAX_DEPTH:
        raise PlainDataError("nested too deeply")
    cls = type(value)
    if value is None or cls is bool or cls is str:
        return value
    if cls is float:
        return value
    if cls is int:
        return value if -_SMALL_INT < value < _SMALL_INT else {"i": hex(value)}
    if cls is list:
        return [encode(item, depth + 1) for item in value]
    if cls is tuple:
        return {"t": [encode(item, depth + 1) for item in value]}
    if cls is dict:
        return {"d": [[encode(k, depth + 1), encode(v, depth + 1)] for k, v in value.items()]}
    if cls is set or cls is frozenset:
        return {"s" if cls is set else "f": [encode(item, depth + 1) for item in value]}
    if cls is bytes:
        return {"b": value.hex()}
    return encode(_numpy_scalar(value), depth)


def decode(data, depth: int = 0):
    """The plain value `data` (parsed JSON) encodes; `PlainDataError` for anything that is not such an encoding."""
    if depth > MAX_DEPTH:
        raise PlainDataError("nested too deeply")
    cls = type(data)
    if data is None or cls in (bool, int, float, str):
        return data
    if cls is list:
        return [decode(item, depth + 1) for item in data]
    if cls is not dict or len(data) != 1:
        raise PlainDataError("not an encoding of plain data")
    ((tag, body),) = data.items()
    if tag == "i" and type(body) is str:
        try:
            return int(body, 16)
        except ValueError:
            raise PlainDataError("bad integer") from None
    if tag == "b" and type(body) is str:
        try:
            return bytes.fromhex(body)
        except ValueError:
            raise PlainDataError("bad bytes") from None
    if type(body) is not list:
        raise PlainDataError("not an encoding of plain data")
    if tag == "t":
        return tuple(decode(item, depth + 1) for item in body)
    try:
        if tag == "d":
            out = {}
            for pair in body:
                if type(pair) is not list or len(pair) != 2:
                    raise PlainDataError("bad dict item")
                out[decode(pair[0], depth + 1)] = decode(pair[1], depth + 1)
            return out
        if tag == "s":
            return {decode(item, depth + 1) for item in body}
        if tag == "f":
            return frozenset(decode(item, depth + 1) for item in body)
    except TypeError:  # an unhashable key or member
        raise PlainDataError("unhashable key or set member") from None
    raise PlainDataError(f"unknown tag {tag!r}")


def dumps(value) -> bytes:
    """`value` encoded as one JSON message (UTF-8)."""
    return json.dumps(encode(value), separators=(",", ":")).encode("utf-8")


def loads(message: bytes):
    """The plain value of one message; `PlainDataError` for anything else (bad JSON, tags, depth, size)."""
    try:
        data = json.loads(message.decode("utf-8"))
    except (ValueError, RecursionError, UnicodeDecodeError) as exc:
        raise PlainDataError(f"not JSON: {type(exc).__name__}") from None
    return decode(data)


def write_frame(fd: int, message: bytes) -> None:
    """Write one length-prefixed message to a file descriptor."""
    data = b"%016x" % len(message) + message
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def read_frame(fd: int, limit: int = MAX_FRAME_BYTES) -> bytes | None:
    """One length-prefixed message from a file descriptor; None at end-of-file; `PlainDataError` when the header is
    malformed or announces more than `limit` bytes."""
    header = _read_exactly(fd, 16)
    if header is None:
        return None
    try:
        size = int(header.decode("ascii"), 16)
    except (UnicodeDecodeError, ValueError):
        raise PlainDataError("bad frame header") from None
    if not 0 <= size <= limit:
        raise PlainDataError(f"frame of {size} bytes over the limit of {limit}")
    body = _read_exactly(fd, size)
    if body is None:
        return None
    return body


def _read_exactly(fd: int, n: int) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
