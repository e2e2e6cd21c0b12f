"""Reference agents: a solver that does the work, and a guesser that must fail.

`solve` reads only what an agent sees (`prompt` and `payload`, never `private`) and answers with
deterministic skills of its own: an `ast` evaluator with a whitelist for arithmetic (and exact
`Fraction` arithmetic over a requester's decimal figures), a library of source templates driven by
the task family for python, label and sentence patterns for extraction, and a fact table parsed
from the corpus for retrieval. Passing every threshold with it shows the exams are solvable as
stated; `random_answer` shows they are not passed by guessing.

It answers exam items and work items (`skills.work_item`) alike, since both are items with a
payload valid against the capability's input schema. It is an offline agent, not a model: a
python spec outside its task families, or a document outside its patterns, is an ExamError.
"""

from __future__ import annotations

import ast
import random
import re
from collections.abc import Callable
from datetime import date
from decimal import Decimal
from fractions import Fraction
from string import Template

from accord.identity.challenges.base import JSON, ExamItem, JSONObject
from accord.identity.errors import ExamError

# --- arithmetic ---------------------------------------------------------------------------------

_BINARY_OPERATORS: dict[type[ast.operator], Callable[[Fraction, Fraction], Fraction]] = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
}
UNIT_SIZES: dict[str, tuple[str, Fraction]] = {
    "km": ("m", Fraction(1000)),
    "m": ("m", Fraction(1)),
    "cm": ("m", Fraction(1, 100)),
    "mm": ("m", Fraction(1, 1000)),
    "t": ("g", Fraction(10**6)),
    "kg": ("g", Fraction(1000)),
    "g": ("g", Fraction(1)),
    "mg": ("g", Fraction(1, 1000)),
    "h": ("s", Fraction(3600)),
    "min": ("s", Fraction(60)),
    "s": ("s", Fraction(1)),
}


def _evaluate_node(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _evaluate_node(node.body)
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY_OPERATORS:
        operate = _BINARY_OPERATORS[type(node.op)]
        return operate(_evaluate_node(node.left), _evaluate_node(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        value = _evaluate_node(node.operand)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return Fraction(node.value)
    raise ExamError(f"not allowed in an arithmetic expression: {type(node).__name__}")


def evaluate_expression(text: str) -> Fraction:
    """The exact value of an expression of integers, + - * / (or their Unicode signs) and brackets.

    Raises ExamError on anything else (names, calls, floats, powers) and on division by zero.
    """
    source = (
        text.replace("\N{MULTIPLICATION SIGN}", "*")
        .replace("\N{DIVISION SIGN}", "/")
        .replace("\N{MINUS SIGN}", "-")
    )
    if len(source) > 1000:
        raise ExamError("expression too long")
    try:
        tree = ast.parse(source, mode="eval")
        return _evaluate_node(tree)
    except SyntaxError as exc:
        raise ExamError(f"not an expression: {text!r}") from exc
    except ZeroDivisionError as exc:
        raise ExamError("division by zero") from exc


def _exact_answer(value: Fraction) -> JSON:
    return value.numerator if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


MAX_EXACT_ANSWER_CHARS = 200


def decimal_places(text: str) -> int:
    """How many digits `text` (a decimal such as "120.50") has after its point."""
    return len(text.partition(".")[2])


def exact_decimal_text(value: Fraction, places: int) -> str | None:
    """`value` as a decimal string with at least `places` digits after the point ("163.69",
    "101.00"), or None when it has no finite decimal expansion (such as 1/3)."""
    denominator, twos, fives = value.denominator, 0, 0
    while denominator % 2 == 0:
        denominator, twos = denominator // 2, twos + 1
    while denominator % 5 == 0:
        denominator, fives = denominator // 5, fives + 1
    if denominator != 1:
        return None
    places = max(places, twos, fives)
    scaled = abs(value) * 10**places
    assert scaled.denominator == 1
    digits = str(scaled.numerator).rjust(places + 1, "0")
    sign = "-" if value < 0 else ""
    if places == 0:
        return sign + digits
    return f"{sign}{digits[:-places]}.{digits[-places:]}"


def solve_figures(figures: list[str], operation: str) -> str:
    """The exact result of `operation` over decimal `figures`, as a string: a decimal with at
    least as many places as the most precise figure when the result has a finite decimal
    expansion (a sum of "120.50" and "43.19" is "163.69"), otherwise a fraction "p/q".

    Raises ExamError for no figures, a figure that is not a decimal, an unknown operation, or a
    result longer than an answer may be.
    """
    if not figures:
        raise ExamError("no figures to operate on")
    try:
        values = [Fraction(Decimal(figure)) for figure in figures]
    except (ArithmeticError, ValueError) as exc:
        raise ExamError(f"not decimal figures: {figures!r}") from exc
    places = max(decimal_places(figure) for figure in figures)
    if operation == "sum":
        result = sum(values, Fraction(0))
    elif operation == "product":
        result = Fraction(1)
        for value in values:
            result *= value
        places = 0
    elif operation == "mean":
        result = sum(values, Fraction(0)) / len(values)
    elif operation == "min":
        result = min(values)
    elif operation == "max":
        result = max(values)
    else:
        raise ExamError(f"unknown figures operation {operation!r}")
    text = exact_decimal_text(result, places) or f"{result.numerator}/{result.denominator}"
    if len(text) > MAX_EXACT_ANSWER_CHARS:
        raise ExamError(f"the exact {operation} has more than {MAX_EXACT_ANSWER_CHARS} characters")
    return text


def solve_arithmetic(payload: JSONObject) -> JSON:
    """Raises ExamError on an unknown kind, unit, operation or expression, or bad figures."""
    kind = payload.get("kind")
    if kind == "figures":
        figures, operation = payload.get("figures"), payload.get("operation")
        if not isinstance(figures, list) or not all(isinstance(f, str) for f in figures):
            raise ExamError("figures must be a list of decimal strings")
        return solve_figures([str(f) for f in figures], str(operation))
    if kind == "expression":
        return _exact_answer(evaluate_expression(str(payload.get("expression"))))
    if kind == "conversion":
        source, target = str(payload.get("from")), str(payload.get("to"))
        if source not in UNIT_SIZES or target not in UNIT_SIZES:
            raise ExamError(f"unknown unit in {source!r} → {target!r}")
        (source_base, source_size), (target_base, target_size) = (
            UNIT_SIZES[source],
            UNIT_SIZES[target],
        )
        if source_base != target_base:
            raise ExamError(f"cannot convert {source} to {target}")
        amount = Fraction(Decimal(str(payload.get("value"))))
        return _exact_answer(amount * source_size / target_size)
    raise ExamError(f"unknown arithmetic item kind {kind!r}")


# --- python -------------------------------------------------------------------------------------

TEMPLATES: dict[str, str] = {
    "sum_multiples": """
def $name(xs):
    return sum(x for x in xs if x % $k == 0)
""",
    "count_in_range": """
def $name(xs):
    return sum(1 for x in xs if $low <= x <= $high)
""",
    "rotate_left": """
def $name(xs):
    if not xs:
        return []
    shift = $k % len(xs)
    return xs[shift:] + xs[:shift]
""",
    "caesar": """
def $name(s):
    out = []
    for c in s:
        if "a" <= c <= "z":
            out.append(chr((ord(c) - ord("a") + $k) % 26 + ord("a")))
        else:
            out.append(c)
    return "".join(out)
""",
    "run_length": """
def $name(s):
    runs = []
    for c in s:
        key = c.lower() if $fold_case else c
        if runs and runs[-1][2] == key:
            runs[-1][1] += 1
        else:
            runs.append([c, 1, key])
    return [[c, n] for c, n, _ in runs]
""",
    "recurrence": """
def $name(n):
    a, b = $a0 % $m, $a1 % $m
    if n == 0:
        return a
    for _ in range(n - 1):
        a, b = b, ($p * b + ($q) * a) % $m
    return b
""",
    "dedupe": """
def $name(words):
    seen, out = set(), []
    for w in words:
        key = w.lower() if $fold_case else w
        if key not in seen:
            seen.add(key)
            out.append(w)
    return out
""",
    "max_window_sum": """
def $name(xs):
    w = $w
    if len(xs) < w:
        return None
    best = current = sum(xs[:w])
    for i in range(w, len(xs)):
        current += xs[i] - xs[i - w]
        best = max(best, current)
    return best
""",
    "digit_sum": """
def $name(n):
    total = 0
    while n > 0:
        total += n % $base
        n //= $base
    return total
""",
    "balanced": """
def $name(s):
    pairs = $pairs
    partner = {p[1]: p[0] for p in pairs}
    opening = {p[0] for p in pairs}
    stack = []
    for c in s:
        if c in opening:
            stack.append(c)
        elif c in partner:
            if not stack or stack[-1] != partner[c]:
                return False
            stack.pop()
    return not stack
""",
    "top_word": """
def $name(text):
    counts = {}
    for w in text.split():
        w = w.lower()
        if len(w) >= $min_len:
            counts[w] = counts.get(w, 0) + 1
    if not counts:
        return None
    best = max(counts.values())
    return min(w for w, c in counts.items() if c == best)
""",
    "clamp": """
def $name(xs):
    return [min(max(x, $low), $high) for x in xs]
""",
    "nth_largest": """
def $name(xs):
    distinct = sorted(set(xs), reverse=True)
    return distinct[$nth - 1] if len(distinct) >= $nth else None
""",
    "prefix_mod": """
def $name(xs):
    out, total = [], 0
    for x in xs:
        total += x
        out.append(total % $m)
    return out
""",
    "interleave": """
def $name(a, b):
    first, second = (a, b) if $first == "a" else (b, a)
    out = []
    for i in range(max(len(first), len(second))):
        if i < len(first):
            out.append(first[i])
        if i < len(second):
            out.append(second[i])
    return out
""",
}
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _literal(value: JSON) -> str:
    """A Python literal for a spec parameter. Raises ExamError for anything but plain data."""
    if value is None or isinstance(value, bool | int | str):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_literal(v) for v in value) + "]"
    raise ExamError(f"unsupported task parameter {value!r}")


def solve_python(payload: JSONObject) -> JSON:
    """Source code for the function spec, from the template of its task family.

    Raises ExamError for a spec that names no family it has a template for (it writes only the
    functions of the exam's task families) and for a malformed spec.
    """
    family, name, params = (
        payload.get("family"),
        payload.get("function_name"),
        payload.get("params"),
    )
    if family is None:
        raise ExamError(
            "the reference solver writes only functions of its known task families, and this "
            "spec names no family (it needs an agent that can program)"
        )
    if not isinstance(family, str) or family not in TEMPLATES:
        known = ", ".join(sorted(TEMPLATES))
        raise ExamError(f"no template for task family {family!r} (known: {known})")
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name) or not isinstance(params, dict):
        raise ExamError("malformed task spec")
    values = {key: _literal(value) for key, value in params.items()}
    try:
        return Template(TEMPLATES[family]).substitute(values, name=name).lstrip()
    except KeyError as exc:
        raise ExamError(f"task spec lacks parameter {exc}") from exc


# --- extraction ---------------------------------------------------------------------------------

MONTH_NAMES = (
    "january february march april may june july august september october november december"
)
MONTH_NUMBERS = {month: number for number, month in enumerate(MONTH_NAMES.split(), start=1)}
DATE_PATTERN = r"(?:\d{4}-\d{2}-\d{2}|\d{1,2} [A-Z][a-z]+ \d{4}|[A-Z][a-z]+ \d{1,2}, \d{4})"
TIME_PATTERN = r"\d{1,2}:\d{2}(?: [ap]m)?"
MONEY_PATTERN = r"(?:[€$£]|[A-Z]{3} )?\d[\d,]*\.\d{2}(?: [A-Z]{3})?"
EMAIL_PATTERN = r"[\w.+-]+@[\w-]+(?:\.[\w-]+)+"
SYMBOL_CURRENCIES = {"€": "EUR", "$": "USD", "£": "GBP"}


def parse_date(text: str) -> str:
    """ISO form of "2031-03-14", "14 March 2031" or "March 14, 2031". Raises ExamError."""
    text = text.strip()
    try:
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            return date.fromisoformat(text).isoformat()
        if match := re.fullmatch(r"(\d{1,2}) ([A-Za-z]+) (\d{4})", text):
            day, month, year = match.group(1), match.group(2), match.group(3)
        elif match := re.fullmatch(r"([A-Za-z]+) (\d{1,2}), (\d{4})", text):
            month, day, year = match.group(1), match.group(2), match.group(3)
        else:
            raise ExamError(f"unrecognised date {text!r}")
        return date(int(year), MONTH_NUMBERS[month.lower()], int(day)).isoformat()
    except (KeyError, ValueError) as exc:
        raise ExamError(f"unrecognised date {text!r}") from exc


def parse_time(text: str) -> str:
    """24-hour HH:MM of "19:30" or "7:30 pm". Raises ExamError."""
    match = re.fullmatch(r"(\d{1,2}):(\d{2})(?: ([ap]m))?", text.strip())
    if not match:
        raise ExamError(f"unrecognised time {text!r}")
    hour, minute, half = int(match.group(1)), match.group(2), match.group(3)
    if half:
        hour = hour % 12 + (12 if half == "pm" else 0)
    return f"{hour:02d}:{minute}"


def parse_money(text: str) -> tuple[str, str]:
    """(amount as a plain decimal string, ISO currency) of "€1,234.50", "1,234.50 EUR" or
    "EUR 1,234.50". Raises ExamError."""
    text = text.strip()
    number = re.search(r"\d[\d,]*\.\d{2}", text)
    code = re.search(r"\b[A-Z]{3}\b", text)
    currency = code.group(0) if code else SYMBOL_CURRENCIES.get(text[:1])
    if not number or not currency:
        raise ExamError(f"unrecognised amount {text!r}")
    return number.group(0).replace(",", ""), currency


def _search(document: str, patterns: list[str]) -> re.Match[str]:
    for pattern in patterns:
        match = re.search(pattern, document, re.MULTILINE)
        if match:
            return match
    raise ExamError(f"no pattern of {patterns[0]!r}… matches the document")


def _first(document: str, *patterns: str) -> str:
    return _search(document, list(patterns)).group(1).strip()


FieldExtractor = Callable[[str], str]


def _invoice_total(doc: str) -> tuple[str, str]:
    return parse_money(
        _first(doc, rf"Total due: ({MONEY_PATTERN})", rf"gives a total of ({MONEY_PATTERN})")
    )


def _ticket_price(doc: str) -> tuple[str, str]:
    return parse_money(
        _first(doc, rf"Tickets: ({MONEY_PATTERN})", rf"Standard tickets cost ({MONEY_PATTERN})")
    )


def _event_place(doc: str) -> re.Match[str]:
    return _search(doc, [r"^Venue: (.+), ([^,\n]+)$", r"held at (.+?) in (\S+) on "])


INVOICE_FIELDS: dict[str, FieldExtractor] = {
    "invoice_number": lambda doc: _first(doc, r"INVOICE No\. (\S+)", r"encloses invoice (\S+),"),
    "vendor": lambda doc: _first(doc, r"\A(.+)\n.*\d.*\n\nINVOICE", r"\n.+? for (.+)\s*\Z"),
    "customer": lambda doc: _first(doc, r"Bill to: (.+)", r"\ADear \S+ \S+ of (.+),\n"),
    "issue_date": lambda doc: parse_date(
        _first(doc, rf"Invoice date: ({DATE_PATTERN})", rf"dated ({DATE_PATTERN})\.")
    ),
    "due_date": lambda doc: parse_date(
        _first(doc, rf"Payment due: ({DATE_PATTERN})", rf"payable by ({DATE_PATTERN})\.")
    ),
    "total": lambda doc: _invoice_total(doc)[0],
    "currency": lambda doc: _invoice_total(doc)[1],
}
EVENT_FIELDS: dict[str, FieldExtractor] = {
    "event_name": lambda doc: _first(
        doc, r"\A(.+)\nOrganised by", r"invites you to (.+?), held at"
    ),
    "organiser": lambda doc: _first(doc, r"^Organised by (.+)$", r"\A(.+?) invites you to"),
    "venue": lambda doc: _event_place(doc).group(1).strip(),
    "city": lambda doc: _event_place(doc).group(2).strip(),
    "date": lambda doc: parse_date(
        _first(doc, rf"^Date: ({DATE_PATTERN})", rf" on ({DATE_PATTERN})\. Doors open")
    ),
    "start_time": lambda doc: parse_time(
        _first(doc, rf"programme starts: ({TIME_PATTERN})", rf"begins at ({TIME_PATTERN})\.")
    ),
    "contact_email": lambda doc: _first(doc, rf"({EMAIL_PATTERN})"),
    "ticket_price": lambda doc: _ticket_price(doc)[0],
    "currency": lambda doc: _ticket_price(doc)[1],
}
SHIPMENT_FIELDS: dict[str, FieldExtractor] = {
    "tracking_number": lambda doc: _first(
        doc, r"Tracking number: (\S+)", r"tracking number (\S+?)\.\s"
    ),
    "sender": lambda doc: _first(doc, r"^From: (.+), [^,\n]+$", r"from (.+?) left our"),
    "recipient": lambda doc: _first(doc, r"^To: ([^,\n]+),", r"\AHello ([^,]+),"),
    "ship_date": lambda doc: parse_date(
        _first(doc, rf"Dispatched: ({DATE_PATTERN})", rf"depot on ({DATE_PATTERN}) and")
    ),
    "delivery_date": lambda doc: parse_date(
        _first(doc, rf"Expected delivery: ({DATE_PATTERN})", rf"by ({DATE_PATTERN})\. It travels")
    ),
    "weight_kg": lambda doc: _first(doc, r"total weight: ([\d.]+) kg", r"weighing ([\d.]+) kg"),
    "destination_city": lambda doc: _first(doc, r"^To: .+, ([^,\n]+)$", r"should reach (\S+) by"),
}
EXTRACTORS: dict[str, dict[str, FieldExtractor]] = {
    "invoice": INVOICE_FIELDS,
    "event": EVENT_FIELDS,
    "shipment": SHIPMENT_FIELDS,
}
KIND_MARKERS: dict[str, re.Pattern[str]] = {
    "invoice": re.compile(r"^INVOICE No\. |\bencloses invoice ", re.MULTILINE),
    "event": re.compile(r"^Organised by |\binvites you to ", re.MULTILINE),
    "shipment": re.compile(r"^SHIPPING NOTICE$|\bunder tracking number ", re.MULTILINE),
}


def detect_document_kind(document: str) -> str:
    """Which of invoice, event or shipment `document` is, from the phrases each form uses.

    Raises ExamError when no kind's phrases appear, or more than one kind's do.
    """
    kinds = [kind for kind, marker in KIND_MARKERS.items() if marker.search(document)]
    if len(kinds) != 1:
        found = " and ".join(kinds) if kinds else "no"
        raise ExamError(f"cannot tell the kind of document: it reads as {found} known kind")
    return kinds[0]


def solve_extraction(payload: JSONObject) -> JSON:
    """The asked fields, and only those, extracted from the document.

    The document's kind is the payload's `kind` or, when absent, detected from the document.
    Raises ExamError for an unknown kind, a field the solver does not know for that kind, or a
    document its patterns do not fit.
    """
    kind, document, fields = payload.get("kind"), payload.get("document"), payload.get("fields")
    if not isinstance(document, str) or not isinstance(fields, dict):
        raise ExamError("an extraction item needs a document and an object of fields")
    if kind is None:
        kind = detect_document_kind(document)
    if not isinstance(kind, str) or kind not in EXTRACTORS:
        raise ExamError(f"cannot extract from a {kind!r} document")
    extractors = EXTRACTORS[kind]
    unknown = sorted(set(fields) - set(extractors))
    if unknown:
        known = ", ".join(extractors)
        raise ExamError(
            f"the reference solver cannot find {', '.join(unknown)} in a {kind} document "
            f"(it knows {known})"
        )
    return {name: extractors[name](document) for name in fields}


# --- retrieval ----------------------------------------------------------------------------------

COMPANY_PATTERNS = [
    re.compile(
        rf"(?P<name>.+?) is headquartered in (?P<city>.+?)\. It was founded on "
        rf"(?P<founded>{DATE_PATTERN}) by (?P<founder>.+?) and employs (?P<staff>[\d,]+) "
        r"people\. Its registry code is (?P<code>\S+?)\."
    ),
    re.compile(
        rf"Founded by (?P<founder>.+?) on (?P<founded>{DATE_PATTERN}), (?P<name>.+?) \(registry "
        r"code (?P<code>\S+?)\) has its head office in (?P<city>.+?) and a workforce of "
        r"(?P<staff>[\d,]+)\."
    ),
]
PERSON_PATTERNS = [
    re.compile(rf"(?P<name>.+?) was born in (?P<city>.+?) on (?P<born>{DATE_PATTERN})\."),
    re.compile(
        rf"Born on (?P<born>{DATE_PATTERN}) in (?P<city>.+?), (?P<name>.+?) later became an "
        r"entrepreneur\."
    ),
]


def _fact_table(corpus: list[JSON]) -> tuple[dict[str, dict[str, str]], dict[str, dict[str, str]]]:
    """(companies by name, people by name), each a dict of the facts their passage states."""
    companies: dict[str, dict[str, str]] = {}
    people: dict[str, dict[str, str]] = {}
    for passage in corpus:
        if not isinstance(passage, str):
            continue
        for pattern, table in [(p, companies) for p in COMPANY_PATTERNS] + [
            (p, people) for p in PERSON_PATTERNS
        ]:
            match = pattern.fullmatch(passage)
            if match:
                facts = match.groupdict()
                table[facts["name"]] = facts
                break
    return companies, people


def _company(companies: dict[str, dict[str, str]], name: str) -> dict[str, str]:
    if name not in companies:
        raise ExamError(f"the corpus says nothing about {name!r}")
    return companies[name]


def solve_retrieval(payload: JSONObject) -> JSON:
    """Raises ExamError if the question or the corpus is not in a form it understands."""
    corpus, question = payload.get("corpus"), payload.get("question")
    if not isinstance(corpus, list) or not isinstance(question, str):
        raise ExamError("a retrieval item needs a corpus and a question")
    companies, people = _fact_table(corpus)
    if match := re.fullmatch(r"In which city is (.+) headquartered\?", question):
        return _company(companies, match.group(1))["city"]
    if match := re.fullmatch(r"Who founded (.+)\?", question):
        return _company(companies, match.group(1))["founder"]
    if match := re.fullmatch(r"How many people does (.+) employ\?", question):
        return int(_company(companies, match.group(1))["staff"].replace(",", ""))
    if match := re.fullmatch(r"On what date was the founder of (.+) born\?", question):
        founder = _company(companies, match.group(1))["founder"]
        return parse_date(people[founder]["born"])
    if match := re.fullmatch(r"On what date was (.+) founded\?", question):
        return parse_date(_company(companies, match.group(1))["founded"])
    if match := re.fullmatch(r"Which company has the registry code (.+)\?", question):
        return next(name for name, facts in companies.items() if facts["code"] == match.group(1))
    if match := re.fullmatch(r"In which city was the founder of (.+) born\?", question):
        return people[_company(companies, match.group(1))["founder"]]["city"]
    if re.fullmatch(r"Which has more employees, (.+) or (.+)\?", question):
        named = [name for name in companies if name in question]
        if len(named) < 2:
            raise ExamError(f"the corpus does not state both headcounts of {question!r}")
        return max(named, key=lambda name: int(companies[name]["staff"].replace(",", "")))
    raise ExamError(f"cannot parse the question {question!r}")


# --- dispatch -----------------------------------------------------------------------------------

SOLVERS: dict[str, Callable[[JSONObject], JSON]] = {
    "arithmetic": solve_arithmetic,
    "python": solve_python,
    "extraction": solve_extraction,
    "retrieval": solve_retrieval,
}


def solve(item: ExamItem) -> JSON:
    """The reference agent's answer, from what the agent sees (`for_agent()`) only.

    Raises ExamError for a capability it has no skill for or an item it cannot parse.
    """
    seen = item.for_agent()
    capability, payload = seen["capability"], seen["payload"]
    if not isinstance(capability, str) or capability not in SOLVERS:
        raise ExamError(f"no reference solver for {capability!r}")
    if not isinstance(payload, dict):
        raise ExamError("the item payload is not an object")
    return SOLVERS[capability](payload)


def random_answer(item: ExamItem, rng: random.Random) -> JSON:
    """A guess of the right shape, drawn from what the agent sees; it should fail every exam.

    Raises ExamError for an unknown capability.
    """
    payload = item.payload
    if item.capability == "arithmetic":
        return rng.randint(-1000, 1000)
    if item.capability == "python":
        body = rng.choice(["0", "None", "[]", "True", "''", "args[0]"])
        return f"def {payload.get('function_name')}(*args):\n    return {body}\n"
    if item.capability == "extraction":
        words = str(payload.get("document", "")).split() or ["?"]
        fields = payload.get("fields")
        return {name: rng.choice(words) for name in (fields if isinstance(fields, dict) else {})}
    if item.capability == "retrieval":
        answer_format = payload.get("answer_format")
        if answer_format == "integer":
            return rng.randint(120, 90_000)
        if answer_format == "date":
            return date.fromordinal(rng.randint(date(1900, 1, 1).toordinal(), 740_000)).isoformat()
        corpus = payload.get("corpus")
        text = " ".join(str(p) for p in corpus) if isinstance(corpus, list) else ""
        spans: list[str] = re.findall(r"[A-Z][a-z]+(?: [A-Z][a-z]+){0,2}", text) or ["?"]
        return rng.choice(spans)
    raise ExamError(f"no guesser for {item.capability!r}")
