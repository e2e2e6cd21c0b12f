"""Capability `extraction`: read a generated document, return its fields as JSON.

Each item is an invoice, an event notice or a shipping notice, written in one of two styles (a
form or a letter) from invented fields, with distractors (an order date beside the issue date, a
subtotal beside the total, doors-open beside the start time). The agent returns one JSON object;
the grader compares field by field under the normalisation rules the prompt states, and the item
earns its point only when every field is right.

Real work takes the same input, a requester's document and the fields wanted from it; `kind`
(invoice, event, shipment) is optional there, and any subset or other set of fields may be asked.
"""

from __future__ import annotations

import random
import re
import unicodedata
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from fractions import Fraction

from accord.identity.challenges import names
from accord.identity.challenges.base import (
    JSON,
    JSON_SCHEMA_DIALECT,
    DeclaredSchemas,
    ExamItem,
    Grade,
    JSONObject,
    check_item,
    correct,
    generate_items,
    private_field,
    render_instruction,
    wrong,
)
from accord.identity.errors import ExamError

NAME = "extraction"
VERSION = "1"
MAX_VALUE_CHARS = 200
MAX_DOCUMENT_CHARS = 100_000
MAX_FIELDS = 50
MAX_FIELD_DESCRIPTION_CHARS = 500
FIELD_NAME_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]{0,63}$"

CURRENCY_SYMBOLS = {"EUR": "€", "USD": "$", "GBP": "£", "CHF": ""}
TAX_RATES = [5, 7, 10, 19, 20, 25]

FIELD_TYPES = ("text", "date", "time", "amount", "currency")
DOCUMENT_KINDS = ("invoice", "event", "shipment")


@dataclass(frozen=True)
class Field:
    name: str
    type: str
    description: str


INVOICE_FIELDS = (
    Field("invoice_number", "text", "the invoice's number"),
    Field("vendor", "text", "the company that issued the invoice"),
    Field("customer", "text", "the company being billed"),
    Field("issue_date", "date", "the date the invoice was issued (not the order date)"),
    Field("due_date", "date", "the date payment is due"),
    Field("total", "amount", "the total payable, tax included"),
    Field("currency", "currency", "the currency of the amounts"),
)
EVENT_FIELDS = (
    Field("event_name", "text", "the event's name"),
    Field("organiser", "text", "the organising company"),
    Field("venue", "text", "the venue's name, without the city"),
    Field("city", "text", "the city the event is held in"),
    Field("date", "date", "the day of the event (not the booking deadline)"),
    Field("start_time", "time", "when the programme starts (not when doors open)"),
    Field("contact_email", "text", "the contact email address"),
    Field("ticket_price", "amount", "the standard (not early-bird) ticket price"),
    Field("currency", "currency", "the currency of the prices"),
)
SHIPMENT_FIELDS = (
    Field("tracking_number", "text", "the tracking number (not the order number)"),
    Field("sender", "text", "the company that sent the goods"),
    Field("recipient", "text", "the person receiving the goods"),
    Field("ship_date", "date", "the day the goods were dispatched"),
    Field("delivery_date", "date", "the expected delivery day"),
    Field("weight_kg", "amount", "the total weight in kilograms"),
    Field("destination_city", "text", "the city the goods are going to"),
)
DOCUMENT_FIELDS = {"invoice": INVOICE_FIELDS, "event": EVENT_FIELDS, "shipment": SHIPMENT_FIELDS}


def format_money(rng_style: int, amount: Decimal, currency: str) -> str:
    """`amount` with thousands separators in one of three styles: €1,234.50 / 1,234.50 EUR /
    EUR 1,234.50 (a currency without a sign uses the code)."""
    number = f"{amount:,.2f}"
    symbol = CURRENCY_SYMBOLS[currency]
    if rng_style == 0 and symbol:
        return f"{symbol}{number}"
    if rng_style == 1:
        return f"{number} {currency}"
    return f"{currency} {number}"


def _cents(rng: random.Random, low: int, high: int) -> Decimal:
    return Decimal(rng.randint(low, high)).scaleb(-2)


def _time_text(rng: random.Random, hour: int, minute: int) -> str:
    if rng.random() < 0.5:
        return f"{hour:02d}:{minute:02d}"
    suffix = "am" if hour < 12 else "pm"
    return f"{(hour % 12) or 12}:{minute:02d} {suffix}"


def _invoice(rng: random.Random) -> tuple[str, JSONObject]:
    vendor, customer = names.company(rng), names.company(rng)
    currency = rng.choice(list(CURRENCY_SYMBOLS))
    style = rng.randrange(3)
    order_date = names.random_date(rng, 2024, 2034)
    issue_date = order_date + timedelta(days=rng.randint(1, 20))
    due_date = issue_date + timedelta(days=rng.choice([14, 21, 30, 45, 60]))
    subtotal = _cents(rng, 1_000, 999_999)
    rate = rng.choice(TAX_RATES)
    tax = (subtotal * rate / 100).quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
    total = subtotal + tax
    number = names.code(rng, 3, 5)
    purchase_order = names.code(rng, 2, 6)

    def money(amount: Decimal) -> str:
        return format_money(style, amount, currency)

    if rng.random() < 0.5:
        text = (
            f"{vendor}\n{names.street_address(rng)}, {names.city(rng)}\n\n"
            f"INVOICE No. {number}\n"
            f"Bill to: {customer}\n"
            f"Order date: {names.write_date(rng, order_date)}\n"
            f"Invoice date: {names.write_date(rng, issue_date)}\n"
            f"Payment due: {names.write_date(rng, due_date)}\n"
            f"Purchase order: {purchase_order}\n\n"
            f"Subtotal: {money(subtotal)}\n"
            f"Tax ({rate}%): {money(tax)}\n"
            f"Total due: {money(total)}\n"
        )
    else:
        text = (
            f"Dear {names.person(rng)} of {customer},\n\n"
            f"Thank you for your order of {names.write_date(rng, order_date)} (purchase order "
            f"{purchase_order}). {vendor} encloses invoice {number}, dated "
            f"{names.write_date(rng, issue_date)}. The net amount of {money(subtotal)} plus tax "
            f"of {money(tax)} gives a total of {money(total)}, payable by "
            f"{names.write_date(rng, due_date)}.\n\n"
            f"Kind regards,\n{names.person(rng)} for {vendor}\n"
        )
    expected: JSONObject = {
        "invoice_number": number,
        "vendor": vendor,
        "customer": customer,
        "issue_date": issue_date.isoformat(),
        "due_date": due_date.isoformat(),
        "total": str(total),
        "currency": currency,
    }
    return text, expected


def _event(rng: random.Random) -> tuple[str, JSONObject]:
    event, organiser = names.event_name(rng), names.company(rng)
    venue = f"{names.word(rng, 2)} {rng.choice(['Hall', 'Pavilion', 'Arena', 'Theatre'])}"
    city = names.city(rng)
    currency = rng.choice(list(CURRENCY_SYMBOLS))
    style = rng.randrange(3)
    day = names.random_date(rng, 2024, 2034)
    deadline = day - timedelta(days=rng.randint(5, 40))
    start_minutes = rng.randint(8 * 4, 21 * 4) * 15
    doors_minutes = start_minutes - rng.choice([15, 30, 45, 60])
    start = (start_minutes // 60, start_minutes % 60)
    doors = (doors_minutes // 60, doors_minutes % 60)
    price = _cents(rng, 500, 30_000)
    early = (price * Decimal("0.8")).quantize(Decimal("0.01"))
    contact = names.email(rng, names.person(rng), organiser.split()[0])

    def money(amount: Decimal) -> str:
        return format_money(style, amount, currency)

    if rng.random() < 0.5:
        text = (
            f"{event.upper()}\nOrganised by {organiser}\n\n"
            f"Date: {names.write_date(rng, day)}\n"
            f"Doors open: {_time_text(rng, *doors)}; programme starts: {_time_text(rng, *start)}\n"
            f"Venue: {venue}, {city}\n"
            f"Tickets: {money(price)} ({money(early)} if booked by "
            f"{names.write_date(rng, deadline)})\n"
            f"Questions? Write to {contact}.\n"
        )
    else:
        text = (
            f"{organiser} invites you to {event}, held at {venue} in {city} on "
            f"{names.write_date(rng, day)}. Doors open at {_time_text(rng, *doors)}; the "
            f"programme begins at {_time_text(rng, *start)}. Standard tickets cost "
            f"{money(price)}; early-bird tickets at {money(early)} are available until "
            f"{names.write_date(rng, deadline)}. Contact: {contact}.\n"
        )
    expected: JSONObject = {
        "event_name": event,
        "organiser": organiser,
        "venue": venue,
        "city": city,
        "date": day.isoformat(),
        "start_time": f"{start[0]:02d}:{start[1]:02d}",
        "contact_email": contact,
        "ticket_price": str(price),
        "currency": currency,
    }
    return text, expected


def _shipment(rng: random.Random) -> tuple[str, JSONObject]:
    sender, recipient = names.company(rng), names.person(rng)
    origin, destination = names.city(rng), names.city(rng)
    ship_date = names.random_date(rng, 2024, 2034)
    delivery_date = ship_date + timedelta(days=rng.randint(1, 12))
    weight = Decimal(rng.randint(1, 99_999)).scaleb(-rng.randint(1, 2))
    tracking, order = names.code(rng, 2, 9), names.code(rng, 3, 6)
    parcels = rng.randint(1, 9)
    if rng.random() < 0.5:
        text = (
            "SHIPPING NOTICE\n"
            f"Tracking number: {tracking}\n"
            f"Order number: {order}\n"
            f"From: {sender}, {origin}\n"
            f"To: {recipient}, {names.street_address(rng)}, {destination}\n"
            f"Dispatched: {names.write_date(rng, ship_date)}\n"
            f"Expected delivery: {names.write_date(rng, delivery_date)}\n"
            f"Parcels: {parcels}; total weight: {weight} kg\n"
        )
    else:
        text = (
            f"Hello {recipient}, your order {order} from {sender} left our {origin} depot on "
            f"{names.write_date(rng, ship_date)} and should reach {destination} by "
            f"{names.write_date(rng, delivery_date)}. It travels as {parcels} parcel(s) "
            f"weighing {weight} kg in total under tracking number {tracking}.\n"
        )
    expected: JSONObject = {
        "tracking_number": tracking,
        "sender": sender,
        "recipient": recipient,
        "ship_date": ship_date.isoformat(),
        "delivery_date": delivery_date.isoformat(),
        "weight_kg": str(weight),
        "destination_city": destination,
    }
    return text, expected


DOCUMENT_MAKERS = {"invoice": _invoice, "event": _event, "shipment": _shipment}


def _make_item(rng: random.Random, item_id: str) -> tuple[str, JSONObject, JSONObject]:
    kind = rng.choice(list(DOCUMENT_MAKERS))
    text, expected = DOCUMENT_MAKERS[kind](rng)
    fields = DOCUMENT_FIELDS[kind]
    payload: JSONObject = {
        "kind": kind,
        "document": text,
        "fields": {f.name: {"type": f.type, "description": f.description} for f in fields},
    }
    return instruction(payload), payload, {"expected": expected}


def instruction(input: JSONObject) -> str:
    """The instruction for a document and the fields wanted (template `extraction.txt`).

    Raises ExamError if the fields are not an object of {type, description} specs.
    """
    kind, fields = input.get("kind"), input.get("fields")
    if not isinstance(fields, dict):
        raise ExamError("an extraction input needs an object of fields")
    described = []
    for name, spec in fields.items():
        if not isinstance(spec, dict):
            raise ExamError(f"field {name!r} needs a type and a description")
        described.append(f"{name} ({spec.get('type')}): {spec.get('description')}")
    source = f"{kind} document" if isinstance(kind, str) else "document"
    return render_instruction(NAME, {"source": source, "fields": "; ".join(described)})


INPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "extraction input",
    "description": "A document and the fields to extract from it, each with a type.",
    "type": "object",
    "required": ["document", "fields"],
    "additionalProperties": False,
    "properties": {
        "kind": {"enum": list(DOCUMENT_KINDS), "description": "the kind of document, if known"},
        "document": {"type": "string", "minLength": 1, "maxLength": MAX_DOCUMENT_CHARS},
        "fields": {
            "type": "object",
            "minProperties": 1,
            "maxProperties": MAX_FIELDS,
            "propertyNames": {"pattern": FIELD_NAME_PATTERN},
            "additionalProperties": {
                "type": "object",
                "required": ["type", "description"],
                "additionalProperties": False,
                "properties": {
                    "type": {"enum": list(FIELD_TYPES)},
                    "description": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_FIELD_DESCRIPTION_CHARS,
                    },
                },
            },
        },
    },
}
OUTPUT_SCHEMA: JSONObject = {
    "$schema": JSON_SCHEMA_DIALECT,
    "title": "extraction output",
    "description": (
        "One JSON object with exactly the fields asked for: text as written, dates as "
        "YYYY-MM-DD, times as HH:MM, amounts as plain decimal strings, currencies as ISO codes."
    ),
    "type": "object",
    "propertyNames": {"pattern": FIELD_NAME_PATTERN},
    "additionalProperties": {
        "anyOf": [{"type": "string", "maxLength": MAX_VALUE_CHARS}, {"type": "integer"}]
    },
}
EXAMPLE_INPUT: JSONObject = {
    "document": (
        "Brelmor Works Ltd\n12 Quolven Lane, Kelvaholm\n\n"
        "INVOICE No. KXQ-20493\n"
        "Bill to: Druvex Instruments GmbH\n"
        "Order date: 2 March 2031\n"
        "Invoice date: March 14, 2031\n"
        "Payment due: 2031-04-13\n"
        "Purchase order: TR-004821\n\n"
        "Subtotal: \u20ac1,000.00\n"
        "Tax (19%): \u20ac190.00\n"
        "Total due: \u20ac1,190.00\n"
    ),
    "fields": {
        "issue_date": {"type": "date", "description": "the date the invoice was issued"},
        "total": {"type": "amount", "description": "the total payable, tax included"},
        "currency": {"type": "currency", "description": "the currency of the amounts"},
    },
}
EXAMPLE_OUTPUT: JSON = {"issue_date": "2031-03-14", "total": "1190.00", "currency": "EUR"}


def normalise_text(value: str) -> str:
    """NFC, case-folded, whitespace collapsed and trimmed."""
    return " ".join(unicodedata.normalize("NFC", value).casefold().split())


_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_TIME = re.compile(r"(\d{1,2}):(\d{2})")
_AMOUNT = re.compile(r"[+-]?\d+(\.\d+)?")


def normalise_value(field_type: str, value: JSON) -> str | None:
    """The comparable form of a field value, or None when it does not follow the rules."""
    if isinstance(value, bool) or value is None or isinstance(value, float | list | dict):
        return None
    if isinstance(value, int):
        return str(Decimal(value).normalize()) if field_type == "amount" else None
    if len(value) > MAX_VALUE_CHARS:
        return None
    text = value.strip()
    if field_type == "text":
        return normalise_text(text)
    if field_type == "currency":
        return text.upper() if text.upper() in CURRENCY_SYMBOLS else None
    if field_type == "date":
        if not _DATE.fullmatch(text):
            return None
        try:
            return date.fromisoformat(text).isoformat()
        except ValueError:
            return None
    if field_type == "time":
        match = _TIME.fullmatch(text)
        if not match or int(match.group(1)) > 23 or int(match.group(2)) > 59:
            return None
        return f"{int(match.group(1)):02d}:{match.group(2)}"
    if field_type == "amount":
        if not _AMOUNT.fullmatch(text):
            return None
        try:
            return str(Decimal(text).normalize())
        except InvalidOperation:
            return None
    raise ExamError(f"unknown field type {field_type!r}")


@dataclass(frozen=True)
class ExtractionCapability(DeclaredSchemas):
    """Structured extraction from short documents, all fields right for the point."""

    INPUT_SCHEMA = INPUT_SCHEMA
    OUTPUT_SCHEMA = OUTPUT_SCHEMA
    EXAMPLE = (EXAMPLE_INPUT, EXAMPLE_OUTPUT)

    name: str = NAME
    description: str = (
        "Extracting named fields (ids, names, dates, times, amounts, currencies) from invoices, "
        "event notices and shipping notices into normalised JSON."
    )
    version: str = VERSION
    item_count: int = 10
    threshold: Fraction = Fraction(4, 5)

    def instruction(self, input: JSONObject) -> str:
        """Raises ExamError if the fields are not an object of {type, description} specs."""
        return instruction(input)

    def generate(self, seed: bytes, n: int) -> list[ExamItem]:
        """Raises ExamError on a seed shorter than 16 bytes or `n` outside 0..1000."""
        return generate_items(self.name, self.version, seed, n, _make_item)

    def grade(self, item: ExamItem, answer: JSON) -> Grade:
        """Raises ExamError if `item` is not an extraction item or is malformed."""
        check_item(item, self.name)
        expected = private_field(item, "expected")
        fields = item.payload.get("fields")
        if not isinstance(expected, dict) or not isinstance(fields, dict):
            raise ExamError(f"item {item.item_id} is malformed")
        if not isinstance(answer, dict):
            return wrong(item, "the answer must be a JSON object of the requested fields")
        missing, unreadable, mismatched = [], [], []
        for field_name, spec in fields.items():
            field_type = spec.get("type") if isinstance(spec, dict) else None
            if not isinstance(field_type, str) or field_name not in expected:
                raise ExamError(f"item {item.item_id} has a malformed field {field_name!r}")
            if field_name not in answer:
                missing.append(field_name)
                continue
            given = normalise_value(field_type, answer[field_name])
            if given is None:
                unreadable.append(field_name)
            elif given != normalise_value(field_type, expected[field_name]):
                mismatched.append(field_name)
        problems = [
            f"{label}: {', '.join(found)}"
            for label, found in (
                ("missing", missing),
                ("not in the stated format", unreadable),
                ("wrong", mismatched),
            )
            if found
        ]
        if problems:
            return wrong(item, "; ".join(problems))
        return correct(item, f"all {len(fields)} fields right")


EXTRACTION = ExtractionCapability()
