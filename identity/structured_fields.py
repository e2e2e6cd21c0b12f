"""Structured Field Values for HTTP (RFC 8941): the subset RFC 9421 signatures and RFC 9530
digests are written in — Dictionaries, Inner Lists, Items and their Parameters.

Bare items map to Python as: Integer `int`, Decimal `decimal.Decimal`, String `str`,
Token `Token` (a `str` subclass), Byte Sequence `bytes`, Boolean `bool`.

    parse_dictionary('sig=("@method");created=1;keyid="k"')
        == {"sig": Member([Item("@method", {})], {"created": 1, "keyid": "k"})}

Parsing is strict (RFC 8941 §4.2): anything else raises `StructuredFieldError`, a
`ValueError` naming the offending position. Serialization (§4.1) is canonical, so parsing
then serializing a member gives the bytes RFC 9421 signs as `@signature-params`.
"""

from __future__ import annotations

import base64
import binascii
import string
from dataclasses import dataclass, field
from decimal import Decimal

__all__ = [
    "BareItem",
    "Item",
    "Member",
    "StructuredFieldError",
    "Token",
    "parse_dictionary",
    "serialize_bare_item",
    "serialize_dictionary",
    "serialize_member",
]


class StructuredFieldError(ValueError):
    """A field value is not a valid Structured Field of the type asked for."""


class Token(str):
    """An RFC 8941 Token (serialized bare, unlike a String)."""

    __slots__ = ()


BareItem = int | Decimal | str | bytes | bool
Parameters = dict[str, BareItem]


@dataclass(frozen=True)
class Item:
    value: BareItem
    params: Parameters = field(default_factory=dict)


@dataclass(frozen=True)
class Member:
    """A Dictionary member: an Item (`value` is a bare item) or an Inner List (`value` is a
    list of Items), with the member's parameters."""

    value: BareItem | list[Item]
    params: Parameters = field(default_factory=dict)

    @property
    def is_inner_list(self) -> bool:
        return isinstance(self.value, list)


_KEY_FIRST = set(string.ascii_lowercase + "*")
_KEY_CHARS = _KEY_FIRST | set(string.digits + "_-.")
_TOKEN_FIRST = set(string.ascii_letters + "*")
_TCHAR = set(string.ascii_letters + string.digits + "!#$%&'*+-.^_`|~")
_TOKEN_CHARS = _TCHAR | {":", "/"}
_BASE64_CHARS = set(string.ascii_letters + string.digits + "+/=")
_MAX_INTEGER = 999_999_999_999_999


class _Parser:
    def __init__(self, text: str) -> None:
        if not text.isascii():
            raise StructuredFieldError("a structured field holds ASCII characters only")
        self.text = text
        self.at = 0

    def fail(self, what: str) -> StructuredFieldError:
        return StructuredFieldError(f"{what} at character {self.at} of {self.text!r}")

    def peek(self) -> str:
        return self.text[self.at] if self.at < len(self.text) else ""

    def take(self) -> str:
        char = self.peek()
        self.at += 1
        return char

    def skip(self, chars: str) -> None:
        while self.peek() and self.peek() in chars:
            self.at += 1

    def done(self) -> bool:
        return self.at >= len(self.text)

    def dictionary(self) -> dict[str, Member]:
        members: dict[str, Member] = {}
        self.skip(" ")
        while not self.done():
            key = self.key()
            if key in members:
                raise self.fail(f"the key {key!r} appears twice")
            if self.peek() == "=":
                self.take()
                members[key] = self.item_or_inner_list()
            else:
                members[key] = Member(True, self.parameters())
            self.skip(" \t")
            if self.done():
                break
            if self.take() != ",":
                raise self.fail("expected ',' between dictionary members")
            self.skip(" \t")
            if self.done():
                raise self.fail("a trailing ','")
        return members

    def item_or_inner_list(self) -> Member:
        if self.peek() == "(":
            return self.inner_list()
        value = self.bare_item()
        return Member(value, self.parameters())

    def inner_list(self) -> Member:
        self.take()
        items: list[Item] = []
        while not self.done():
            self.skip(" ")
            if self.peek() == ")":
                self.take()
                return Member(items, self.parameters())
            value = self.bare_item()
            items.append(Item(value, self.parameters()))
            if self.peek() not in (" ", ")"):
                raise self.fail("expected ' ' or ')' in an inner list")
        raise self.fail("an inner list without its ')'")

    def parameters(self) -> Parameters:
        params: Parameters = {}
        while self.peek() == ";":
            self.take()
            self.skip(" ")
            key = self.key()
            value: BareItem = True
            if self.peek() == "=":
                self.take()
                value = self.bare_item()
            params[key] = value
        return params

    def key(self) -> str:
        if self.peek() not in _KEY_FIRST:
            raise self.fail("expected a key (lower case letter or '*')")
        start = self.at
        while self.peek() in _KEY_CHARS:
            self.at += 1
        return self.text[start : self.at]

    def bare_item(self) -> BareItem:
        char = self.peek()
        if char == "-" or char.isdigit():
            return self.number()
        if char == '"':
            return self.string()
        if char == ":":
            return self.byte_sequence()
        if char == "?":
            return self.boolean()
        if char in _TOKEN_FIRST:
            return self.token()
        raise self.fail("expected an item")

    def number(self) -> int | Decimal:
        start = self.at
        if self.peek() == "-":
            self.take()
        if not self.peek().isdigit():
            raise self.fail("expected a digit")
        digits_start = self.at
        while self.peek().isdigit():
            self.at += 1
        integer_digits = self.at - digits_start
        if self.peek() != ".":
            if integer_digits > 15:
                raise self.fail("an integer of more than 15 digits")
            return int(self.text[start : self.at])
        if integer_digits > 12:
            raise self.fail("a decimal of more than 12 integer digits")
        self.take()
        fraction_start = self.at
        while self.peek().isdigit():
            self.at += 1
        if not 1 <= self.at - fraction_start <= 3:
            raise self.fail("a decimal needs 1 to 3 fractional digits")
        return Decimal(self.text[start : self.at])

    def string(self) -> str:
        self.take()
        out: list[str] = []
        while not self.done():
            char = self.take()
            if char == "\\":
                escaped = self.take()
                if escaped not in ('"', "\\"):
                    raise self.fail("a '\\' escapes only '\"' or '\\'")
                out.append(escaped)
            elif char == '"':
                return "".join(out)
            elif not " " <= char <= "~":
                raise self.fail("a control character in a string")
            else:
                out.append(char)
        raise self.fail("a string without its closing '\"'")

    def token(self) -> Token:
        start = self.at
        self.take()
        while self.peek() in _TOKEN_CHARS:
            self.at += 1
        return Token(self.text[start : self.at])

    def byte_sequence(self) -> bytes:
        self.take()
        end = self.text.find(":", self.at)
        if end < 0:
            raise self.fail("a byte sequence without its closing ':'")
        encoded = self.text[self.at : end]
        if not set(encoded) <= _BASE64_CHARS:
            raise self.fail("a byte sequence holds base64 characters only")
        self.at = end + 1
        try:
            return base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
        except binascii.Error as exc:
            raise self.fail(f"a byte sequence that is not base64 ({exc})") from exc

    def boolean(self) -> bool:
        self.take()
        char = self.take()
        if char not in ("0", "1"):
            raise self.fail("a boolean is ?0 or ?1")
        return char == "1"


def parse_dictionary(text: str) -> dict[str, Member]:
    """The Dictionary `text` (field lines already joined by ", "), members in order.

    Raises StructuredFieldError when it is not one (a repeated key included: signature labels
    and digest algorithms must not be ambiguous).
    """
    parser = _Parser(text.strip(" "))
    return parser.dictionary()


def serialize_bare_item(value: BareItem) -> str:
    """RFC 8941 §4.1.3; raises StructuredFieldError for a value no bare item can hold."""
    if isinstance(value, bool):
        return "?1" if value else "?0"
    if isinstance(value, int):
        if abs(value) > _MAX_INTEGER:
            raise StructuredFieldError(f"the integer {value} has more than 15 digits")
        return str(value)
    if isinstance(value, Decimal):
        rounded = value.quantize(Decimal("0.001"))
        if abs(rounded) >= 10**12:
            raise StructuredFieldError(f"the decimal {value} has more than 12 integer digits")
        text = f"{rounded:f}".rstrip("0")
        return text + "0" if text.endswith(".") else text
    if isinstance(value, Token):
        if not value or value[0] not in _TOKEN_FIRST or not set(value) <= _TOKEN_CHARS:
            raise StructuredFieldError(f"{value!r} is not a token")
        return str(value)
    if isinstance(value, str):
        if not all(" " <= char <= "~" for char in value):
            raise StructuredFieldError(f"{value!r} holds characters a string cannot")
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(value, bytes):
        return ":" + base64.b64encode(value).decode("ascii") + ":"
    raise StructuredFieldError(f"{value!r} is not a structured field item")


def _serialize_parameters(params: Parameters) -> str:
    out = []
    for key, value in params.items():
        out.append(f";{key}" if value is True else f";{key}={serialize_bare_item(value)}")
    return "".join(out)


def serialize_member(member: Member) -> str:
    """A Dictionary member's value: an Item or an Inner List, with its parameters."""
    if isinstance(member.value, list):
        inner = " ".join(
            serialize_bare_item(item.value) + _serialize_parameters(item.params)
            for item in member.value
        )
        return f"({inner})" + _serialize_parameters(member.params)
    return serialize_bare_item(member.value) + _serialize_parameters(member.params)


def serialize_dictionary(members: dict[str, Member]) -> str:
    """RFC 8941 §4.1.2 (a member whose value is True is written as its key alone)."""
    out = []
    for key, member in members.items():
        if member.value is True:
            out.append(key + _serialize_parameters(member.params))
        else:
            out.append(f"{key}={serialize_member(member)}")
    return ", ".join(out)
