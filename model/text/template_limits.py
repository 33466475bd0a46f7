"""What a chat template may build: sizes checked *before* an operation allocates or computes.

A template's loops are stopped by the render's deadline, but one operator or filter call is a
single C call that holds the GIL until it is done: ``(10*n)**(10**8)`` computes for minutes,
``'a'*3000000000`` allocates 3 GB, ``''|center(10**10)`` 10 GB. No deadline can interrupt them,
so every operation that can grow a value is priced from its operands first and refused past the
caps below (RenderLimitError, which the render reports as the template's failure). The worker
process (model/text/template_worker.py) is the backstop for anything priced wrongly here.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Mapping
from functools import wraps
from typing import Any

from jinja2.utils import Namespace

# The longest string or output a render may build. The longest real prompt (a full 128K-token
# context, ~4 chars a token) is ~0.5 M characters; a template copies a message a few times at most.
MAX_TEXT_CHARS = 16 * 2**20
# The most items a list or tuple a render builds may hold (a million refs is 8 MB).
MAX_ITEMS = 2**20
# The largest integer a render may compute: above the 4,300 digits Python agrees to print, and
# multiplying two of them takes microseconds (a template counts messages; it needs tens of bits).
MAX_INT_BITS = 16_384
# tojson's indent: real templates use 2 or 4; a huge one multiplies the output by the nesting depth.
MAX_JSON_INDENT = 64
# lipsum's paragraphs and words per paragraph: placeholder text, never needed in a prompt.
MAX_LIPSUM = 100

# Widths and precisions in a %-format ("%0999999999d" pads to a billion characters).
_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?")
_DIGITS = re.compile(r"\d+")


class RenderLimitError(Exception):
    """A template operation would build more than a render may: the template's failure."""


def text_size(value: Any, limit: int = MAX_TEXT_CHARS) -> int:
    """An upper estimate of ``len(str(value))`` for template data, without building it.

    Counting stops past ``limit`` (any answer above it means "too big"); a container reached
    twice (``[s] * 1000``) is priced once and counted each time, so it costs its distinct items.
    """
    return _size(value, limit, {}, 0)


def _size(value: Any, limit: int, seen: dict[int, int], depth: int) -> int:
    if isinstance(value, str):
        return len(value) + 2  # + quotes inside a container's repr
    if isinstance(value, bool) or value is None:
        return 5
    if isinstance(value, int):
        return value.bit_length() * 10 // 33 + 2  # log10(2) ~ 0.30
    if isinstance(value, float):
        return 24
    items = _parts(value)
    if items is None:
        return 100  # a macro, an undefined, a cycler...: a short repr
    if id(value) in seen:
        return seen[id(value)]
    if depth > 100:
        return limit + 1  # repr would hit the recursion limit anyway
    seen[id(value)] = 0  # a cycle (a namespace holding itself) reprs as "{...}"
    total = 2
    for item in items:
        total += _size(item, limit, seen, depth + 1) + 2
        if total > limit:
            break
    seen[id(value)] = total
    return total


def _parts(value: Any) -> Iterable[Any] | None:
    if isinstance(value, Namespace):
        value = value._Namespace__attrs
    if isinstance(value, Mapping):
        return (part for pair in value.items() for part in pair)
    if isinstance(value, list | tuple | set | frozenset):
        return value
    return None


def check_text(size: int, what: str) -> None:
    if size > MAX_TEXT_CHARS:
        raise RenderLimitError(f"{what} would be longer than {MAX_TEXT_CHARS} characters")


def check_items(count: int, what: str) -> None:
    if count > MAX_ITEMS:
        raise RenderLimitError(f"{what} would hold more than {MAX_ITEMS} items")


def check_result(value: Any, what: str) -> Any:
    """``value`` if its size is within the caps (a filter's or method's result, priced after the fact)."""
    if isinstance(value, str | bytes):
        check_text(len(value), what)
    elif isinstance(value, list | tuple):
        check_items(len(value), what)
    return value


def check_binop(operator: str, left: Any, right: Any) -> None:
    """Refuse ``left <operator> right`` if its result would exceed a cap (``*``, ``**``, ``+``, ``%``)."""
    if operator == "**":
        _check_power(left, right)
    elif operator == "*":
        _check_repeat(left, right)
        _check_repeat(right, left)
        if _is_int(left) and _is_int(right):
            _check_bits(left.bit_length() + right.bit_length())
    elif operator == "+":
        if isinstance(left, str | bytes) and isinstance(right, str | bytes):
            check_text(len(left) + len(right), "a joined string")
        elif isinstance(left, list | tuple) and isinstance(right, list | tuple):
            check_items(len(left) + len(right), "a joined list")
    elif operator == "%" and isinstance(left, str):
        check_percent_format(left, right if isinstance(right, tuple) else (right,))


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _check_bits(bits: int) -> None:
    if bits > MAX_INT_BITS:
        raise RenderLimitError(f"a number would have more than {MAX_INT_BITS} bits")


def _check_power(base: Any, exponent: Any) -> None:
    if _is_int(base) and _is_int(exponent) and exponent > 0 and abs(base) > 1:
        _check_bits(exponent * (abs(base).bit_length() - 1) + 1)  # at least this many bits


def _check_repeat(sequence: Any, times: Any) -> None:
    if not _is_int(times) or times <= 0:
        return
    if isinstance(sequence, str | bytes):
        check_text(len(sequence) * times, "a repeated string")
    elif isinstance(sequence, list | tuple):
        check_items(len(sequence) * times, "a repeated list")


def check_percent_format(template: str, args: Iterable[Any]) -> None:
    """``template % args`` priced: no width or precision past the text cap, nor a ``*`` one."""
    args = list(args) if not isinstance(args, Mapping) else list(args.values())
    for match in _PERCENT_FIELD.finditer(template):
        for field in match.groups():
            if field == "*":
                _check_widths(args)
            elif field is not None:
                check_text(int(field), "a %-formatted field")
    check_text(len(template) + sum(text_size(arg) for arg in args), "a formatted string")


def check_str_format(template: str, args: Iterable[Any]) -> None:
    """``template.format(*args)`` priced the same way (a spec like ``{:>{}}`` takes its width from args)."""
    args = list(args)
    for _, _, spec, _ in string.Formatter().parse(template):
        if not spec:
            continue
        if "{" in spec:
            _check_widths(args)
        for digits in _DIGITS.findall(spec):
            check_text(int(digits), "a formatted field")
    check_text(len(template) + sum(text_size(arg) for arg in args), "a formatted string")


def _check_widths(args: Iterable[Any]) -> None:
    for arg in args:
        if _is_int(arg):
            check_text(abs(arg), "a formatted field")


# ------------------------------------------------------------------ str methods a template calls
def check_method_call(method: Any, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> None:
    """Price a call of a str method that can grow its string (``center``, ``replace``, ``join``...)."""
    target = getattr(method, "__wrapped__", method)  # the sandbox wraps str.format
    owner, name = getattr(target, "__self__", None), getattr(target, "__name__", "")
    if not isinstance(owner, str):
        return
    pricing = _STR_METHODS.get(name)
    if pricing is not None:
        pricing(owner, *args, **kwargs)


def _pad(text: str, width: Any = 0, *_: Any) -> None:
    if _is_int(width):
        check_text(width, "a padded string")


def _expandtabs(text: str, tabsize: Any = 8) -> None:
    if _is_int(tabsize):
        check_text(len(text) + text.count("\t") * tabsize, "a string with tabs expanded")


def _replace(text: str, old: Any = "", new: Any = "", count: Any = -1, *_: Any) -> None:
    if isinstance(old, str) and isinstance(new, str):
        hits = text.count(old)
        if _is_int(count) and count >= 0:
            hits = min(hits, count)
        check_text(len(text) + hits * max(0, len(new) - len(old)), "a replaced string")


def _join(separator: str, items: Any = (), *_: Any) -> None:
    if isinstance(items, list | tuple):
        check_items(len(items), "a joined list")
        check_text(sum(text_size(i) for i in items) + len(separator) * len(items), "a joined string")


def _split(text: str, *_: Any, **__: Any) -> None:
    check_items(len(text) // 2 + 1, "a split string")  # at most one piece per two characters


def _format(template: str, *args: Any, **kwargs: Any) -> None:
    check_str_format(template, [*args, *kwargs.values()])


def _format_map(template: str, mapping: Any = None, *_: Any) -> None:
    check_str_format(template, mapping.values() if isinstance(mapping, Mapping) else ())


_STR_METHODS: dict[str, Callable[..., None]] = {
    "center": _pad,
    "ljust": _pad,
    "rjust": _pad,
    "zfill": _pad,
    "expandtabs": _expandtabs,
    "replace": _replace,
    "join": _join,
    "split": _split,
    "rsplit": _split,
    "splitlines": _split,
    "format": _format,
    "format_map": _format_map,
}


# ------------------------------------------------------------------ filters
def _priced(filter_: Callable[..., Any], pricing: Callable[..., None] | None) -> Callable[..., Any]:
    """``filter_`` with ``pricing(value, *args)`` first and its result's size checked after.

    Jinja passes the context or environment first to some filters (``jinja_pass_arg``, kept by
    ``wraps``); the pricing sees the filter's own value and arguments.
    """
    passes_arg = getattr(filter_, "jinja_pass_arg", None) is not None

    @wraps(filter_)
    def priced(*args: Any, **kwargs: Any) -> Any:
        if pricing is not None:
            pricing(*args[passes_arg:], **kwargs)
        return check_result(filter_(*args, **kwargs), f"the {filter_.__name__} filter's result")

    return priced


def _price_center(value: Any, width: Any = 80) -> None:
    _pad("", width)


def _price_indent(value: Any, width: Any = 4, *_: Any, **__: Any) -> None:
    pad = width if isinstance(width, str) else " " * min(width, MAX_TEXT_CHARS + 1) if _is_int(width) else ""
    text = str(value) if isinstance(value, str) else ""
    check_text(len(text) + (text.count("\n") + 1) * len(pad), "an indented string")


def _price_format(value: Any, *args: Any, **kwargs: Any) -> None:
    if isinstance(value, str):
        check_percent_format(value, kwargs or args)


def _price_join(value: Any, d: Any = "", attribute: Any = None) -> None:
    if isinstance(value, list | tuple):
        _join(str(d), value)


def _price_replace(value: Any, old: Any = "", new: Any = "", count: Any = None) -> None:
    if isinstance(value, str):
        _replace(value, old, new, -1 if count is None else count)


def _price_wordwrap(
    value: Any, width: Any = 79, break_long_words: Any = True, wrapstring: Any = None, **_: Any
) -> None:
    if isinstance(value, str) and _is_int(width):
        breaks = len(value) // max(width, 1) + value.count(" ") + 1
        check_text(len(value) + breaks * len(str(wrapstring or "\n")), "a wrapped string")


def _price_list(value: Any, *_: Any) -> None:
    if isinstance(value, str):
        check_items(len(value), "a list of characters")


def _price_count(value: Any, count: Any = 1, *_: Any, **__: Any) -> None:
    if _is_int(count):
        check_items(count, "a batch or slice")


def _price_sum(value: Any, attribute: Any = None, start: Any = 0) -> None:
    if isinstance(value, list | tuple) and isinstance(start, list | tuple):
        check_items(len(start) + sum(len(v) for v in value if isinstance(v, list | tuple)), "a summed list")


def _price_text(value: Any, *_: Any) -> None:
    check_text(text_size(value), "a string of the value")


FILTER_PRICES: dict[str, Callable[..., None] | None] = {
    "center": _price_center,
    "indent": _price_indent,
    "format": _price_format,
    "join": _price_join,
    "replace": _price_replace,
    "wordwrap": _price_wordwrap,
    "list": _price_list,
    "batch": _price_count,
    "slice": _price_count,
    "sum": _price_sum,
    "string": _price_text,
    "pprint": _price_text,
}


def priced_filters(filters: Mapping[str, Callable[..., Any]]) -> dict[str, Callable[..., Any]]:
    """Every filter with its result's size checked, and those that can blow up priced first."""
    return {name: _priced(f, FILTER_PRICES.get(name)) for name, f in filters.items()}


def check_json_layout(indent: Any, separators: Any) -> None:
    """tojson's ``indent`` and ``separators``: each repeated once per item, so kept short."""
    if (_is_int(indent) and indent > MAX_JSON_INDENT) or (
        isinstance(indent, str) and len(indent) > MAX_JSON_INDENT
    ):
        raise RenderLimitError(f"tojson's indent is limited to {MAX_JSON_INDENT}")
    if isinstance(separators, list | tuple) and any(len(str(s)) > MAX_JSON_INDENT for s in separators):
        raise RenderLimitError(f"tojson's separators are limited to {MAX_JSON_INDENT} characters")


def check_lipsum(n: Any = 5, html: Any = True, min: Any = 20, max: Any = 100) -> None:
    if any(_is_int(x) and x > MAX_LIPSUM for x in (n, min, max)):
        raise RenderLimitError(f"lipsum is limited to {MAX_LIPSUM} paragraphs and words")


def check_strftime(format: str) -> None:
    check_text(len(format) * 16, "a formatted date")
    if re.search(r"%[^%a-zA-Z]*\d{4,}", format):
        raise RenderLimitError("a date format may not pad a field to thousands of characters")
