"""RFC 8785 (JCS) canonical JSON: the only bytes accord ever hashes or signs.

`rfc8785` is the reference. Most ledger values (ASCII keys, integers in the I-JSON range, no
floats) have a canonical form that the standard library's C encoder writes identically and
about four times faster; such values take that path, everything else takes the reference one.
A property test holds the two paths to the same bytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import rfc8785

from accord.ledger.errors import CanonicalizationError, MalformedError

JSONValue = Any
"""A value made of dict (str keys), list, str, int, float, bool and None."""

MAX_SAFE_INTEGER = 2**53 - 1

_ENCODER = json.JSONEncoder(
    ensure_ascii=False, allow_nan=False, sort_keys=True, separators=(",", ":")
)
_encode: Callable[[JSONValue], str] = _ENCODER.encode
_c_make_encoder: Any = getattr(json.encoder, "c_make_encoder", None)
if _c_make_encoder is not None:
    # What `_ENCODER.encode` builds anew on every call (the C encoder with its settings, no
    # circular-reference markers: `_plain` has walked the value first), built once.
    _c_encode = _c_make_encoder(
        None,  # markers
        _ENCODER.default,
        json.encoder.encode_basestring,
        None,  # indent
        ":",
        ",",
        True,  # sort_keys
        False,  # skipkeys
        False,  # allow_nan
    )

    def _encode(value: JSONValue) -> str:
        return "".join(_c_encode(value, 0))


def _safe_integer(value: int) -> bool:
    """True; raises CanonicalizationError for an integer outside the I-JSON range."""
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return True
    raise CanonicalizationError(
        f"integer {value} is beyond 2**53; write large amounts (wei) as decimal strings"
    )


def _plain(value: JSONValue) -> bool:
    """True when the stdlib encoder's output is already canonical for `value`.

    Values of exactly the JSON types are checked in a plain loop (the usual event body: a
    flat object of strings and integers); anything else, subclasses included, by
    `_plain_value`. Raises CanonicalizationError for an integer outside the I-JSON range.
    """
    kind = type(value)
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str or not key.isascii():
                return False
            of = type(item)
            if of is str or of is bool or item is None:
                continue
            if of is int:
                _safe_integer(item)
            elif not _plain(item):
                return False
        return True
    if kind is list:
        return all(_plain(item) for item in value)
    return _plain_value(value)


def _plain_value(value: JSONValue) -> bool:
    """`_plain` for any value (the general case, by isinstance)."""
    if isinstance(value, str) or value is None or value is True or value is False:
        return True
    if isinstance(value, int):
        return _safe_integer(value)
    if isinstance(value, dict):
        return all(
            type(key) is str and key.isascii() and _plain(item) for key, item in value.items()
        )
    if isinstance(value, list | tuple):
        return all(_plain(item) for item in value)
    return False


def canonical_json(value: JSONValue) -> bytes:
    """The RFC 8785 bytes of `value`.

    Raises CanonicalizationError for values JSON cannot carry exactly: non-string keys,
    integers beyond 2**53 (write wei as decimal strings), NaN or infinities, lone surrogates,
    other types.
    """
    if _plain(value):
        try:
            return _encode(value).encode("utf-8")
        except UnicodeEncodeError:
            pass  # a lone surrogate: let the reference path name the problem
    try:
        return bytes(rfc8785.dumps(value))
    except (rfc8785.CanonicalizationError, TypeError, ValueError, UnicodeError) as exc:
        raise CanonicalizationError(f"cannot canonicalize: {exc}") from exc


_encode_text = json.encoder.encode_basestring  # what `_encode` writes for a str (C)


def canonical_text(text: str) -> bytes:
    """The RFC 8785 bytes of one JSON string: what `canonical_json(text)` returns, spared the
    walk over a value (the stdlib escapes exactly what JCS escapes: `"`, `\\` and the
    control characters, with the same short forms and lower-case `\\u00xx`).

    Raises CanonicalizationError for a lone surrogate, TypeError for a value not a str.
    """
    if type(text) is not str:
        raise TypeError(f"expected a str, not {type(text).__name__}")
    try:
        return _encode_text(text).encode("utf-8")
    except UnicodeEncodeError:
        return canonical_json(text)  # raises, naming the problem


def _number(text: str) -> int | float:
    """JSON numbers are IEEE doubles (RFC 8785): integers beyond 2**53 parse as floats, so
    only those a double holds exactly can be canonical."""
    value = int(text)
    if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        return value
    return float(value)


def parse_canonical(data: bytes) -> JSONValue:
    """Parse bytes that must already be in canonical form.

    Raises MalformedError when they are not JSON, not UTF-8, or not canonical (so no two byte
    strings ever stand for the same signed value).
    """
    try:
        text = data.decode("utf-8")
        value = json.loads(text, parse_int=_number)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise MalformedError(f"not UTF-8 JSON: {exc}") from exc
    try:
        again = canonical_json(value)
    except CanonicalizationError as exc:
        raise MalformedError(str(exc)) from exc
    if again != data:
        raise MalformedError("JSON is not in RFC 8785 canonical form")
    return value
