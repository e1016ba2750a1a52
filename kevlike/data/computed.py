"""The ``computed`` reading source (issue 31, "numbers and quantities"): short messages whose answer is a number
*computed* from the numbers they state — a price after a discount, a unit price times a count, a share of a total,
a span between two clock times or two dates, a rise from one amount to another, an order's items plus delivery —
never stated itself.

Why: on the second batch of fresh realistic pages (stage 47, docs/results/stage47/README.md) the shipped reader
answers 0.548 of the questions that need arithmetic on numbers in the text, against 0.736 on pages whose numbers are
read as stated; ``quantities`` and ``numbers`` (:mod:`kevlike.data.reading`) only ever ask for a stated number.

Each operation (:data:`OPERATIONS`) writes one or two sentences with its operands and asks about the result: a score
over ordered bins of it (:func:`kevlike.data.reading._wide_levels`, in the text's currency: either direction, no
bin edge on the result), a choice of the exact result among the operands as stated and other wrong results (the
numbers a reader who does not compute would pick), and a more-than / at-most pair tied as twins. A row holds one or two operations, 4–7 questions.

Rows are ``(request, gold, twins)``; seeds per split as :mod:`kevlike.data.reading` (train 1, validation 2, test 3).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from kevlike.data.reading import (
    CONNECT, FRAMES, NAMES, NUM_WORDS, PAIR_FORMS, SPLIT_SEEDS, UNITS, _Req, _wide_levels, pad, quantity
)

SPLIT_SIZES = {"train": 4000, "validation": 80, "test": 300}
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")
ITEMS = ("jacket", "desk", "bicycle", "sofa", "camera", "printer", "mattress", "guitar", "tent", "monitor")
RUNS = (("test runs", "failed", "What share of the test runs failed?"),
        ("survey forms", "came back", "What share of the survey forms came back?"),
        ("delivery slots", "were missed", "What share of the delivery slots were missed?"),
        ("invited members", "voted", "What share of the invited members voted?"))


@dataclass
class Op:
    """One operation's draw: ``sentence`` (the text stating the operands), the result's ``unit`` (a key of
    :data:`kevlike.data.reading.UNITS`) and ``value`` (an int), ``operands`` (the numbers the sentence states, in
    its order), ``traps`` (wrong results a reader who does not compute would give, the most tempting first: a
    stated operand), the ``noun`` a yes/no question names with its ``verb``, two how-questions, and the text's
    currency format (``money``)."""

    kind: str
    sentence: str
    unit: str
    value: int
    operands: tuple
    traps: tuple
    verb: str
    noun: str
    hows: tuple
    money: str = "EUR {v}"


def _computed(make):
    """``make`` redrawn until its result is not one of the numbers its sentence states (3 nights from the 3rd, 50 %
    off 100 paid 50), and with the result out of its traps: a reader must compute it, and cannot copy it."""
    def draw(rng: random.Random) -> Op:
        while True:
            op = make(rng)
            if op.value not in op.operands:
                op.traps = tuple(t for t in dict.fromkeys(op.traps) if t != op.value)
                return op
    draw.__name__, draw.__doc__ = make.__name__, make.__doc__
    return draw


def _money(rng: random.Random) -> str:
    return rng.choice(("EUR {v}", "€{v}", "£{v}", "${v}"))


@_computed
def discount(rng: random.Random) -> Op:
    """A list price and a percentage off it: the price paid."""
    money, item = _money(rng), rng.choice(ITEMS)
    price, off = 20 * rng.randint(2, 60), rng.choice((10, 20, 25, 30, 40, 50))
    paid = price * (100 - off) // 100
    p = quantity("money", price, money=money)
    sentence = rng.choice((f"The {item} was listed at {p}, and {off}% was taken off at the till.",
                           f"We bought the {item}: the price tag said {p}, minus the {off}% sale discount."))
    return Op("discount", sentence, "money", paid, (price, off), (price, price * off // 100, price - off),
              "was", f"the price paid for the {item}",
              (f"How much was paid for the {item}?", f"What did the {item} cost after the discount?"), money)


@_computed
def rate_times_count(rng: random.Random) -> Op:
    """A price per unit and a count: the total."""
    money = _money(rng)
    each, n = rng.randint(3, 60), rng.randint(2, 12)
    e = quantity("money", each, money=money)
    count = NUM_WORDS[n] if n <= 10 and rng.random() < 0.4 else str(n)
    sentence, noun, hows = rng.choice((
        (f"Tickets cost {e} each, and we bought {count} of them.", "the total for the tickets",
         ("How much did the tickets cost in total?", "What was the total paid for the tickets?")),
        (f"The workshop fee is {e} per person, and {count} people from our team signed up.",
         "the team's total workshop fee",
         ("How much is the workshop fee for the whole team?", "What does the team pay in workshop fees in total?"))))
    return Op("rate", sentence, "money", each * n, (each, n), (each, each * (n + 1), each * (n - 1)), "is", noun, hows,
              money)


@_computed
def share(rng: random.Random) -> Op:
    """A part of a total: the part as a percentage of the total."""
    total = rng.choice((20, 40, 50, 80, 200))
    while True:
        part = rng.randint(1, total - 1)
        pct = part * 100 / total
        if pct == int(pct) and 1 <= pct <= 97:
            break
    things, verb, how = rng.choice(RUNS)
    sentence = rng.choice((f"Of the {total} {things}, {part} {verb}.", f"{part} of the {total} {things} {verb}."))
    traps = (part, 100 - int(pct))
    return Op("share", sentence, "percent", int(pct), (total, part), tuple(t for t in traps if 1 <= t <= 99), "was",
              f"the share of {things} that {verb}", (how, how.replace("What share", "What percentage")))


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


@_computed
def clock_span(rng: random.Random) -> Op:
    """Two clock times on one day: the minutes between them."""
    start = rng.randint(6 * 60, 20 * 60)
    span = rng.choice((rng.randint(7, 59), rng.randint(61, 200)))
    end = start + span
    a, b = _clock(start), _clock(end)
    sentence = rng.choice((f"The outage began at {a} and service was back at {b} the same day.",
                           f"Checkout failed from {a} until {b}, when the fix went out."))
    traps = tuple(t for t in (end % 60, start % 60, span + 60, abs(span - 60)) if t)
    return Op("clock", sentence, "minutes", span, (start, end), traps, "was", "the outage",
              ("How long did the outage last?", "For how long was the service down?"))


@_computed
def date_span(rng: random.Random) -> Op:
    """An arrival and a departure date in one month: the nights between them."""
    month = rng.choice(MONTHS)
    first = rng.randint(1, 17)
    nights = rng.randint(2, 11)
    last = first + nights
    sentence = rng.choice((f"We arrive on {first} {month} and check out on {last} {month}.",
                           f"The booking runs from {month} {first} (arrival) to {month} {last} (departure)."))
    traps = (last, first, nights + 1)
    return Op("dates", sentence, "nights", nights, (first, last), tuple(t for t in traps if 1 <= t <= 30), "is",
              "the stay", ("How many nights is the stay?", "For how many nights is the booking?"))


@_computed
def rise(rng: random.Random) -> Op:
    """An amount before and after a change: the rise."""
    money = _money(rng)
    before = 10 * rng.randint(40, 150)
    up = rng.choice((rng.randint(5, 49), 5 * rng.randint(10, 60)))
    a, b = quantity("money", before, money=money), quantity("money", before + up, money=money)
    sentence = rng.choice((f"From next month the rent goes up from {a} to {b}.",
                           f"Our monthly rent will rise from {a} to {b} when the new lease starts."))
    return Op("rise", sentence, "money", up, (before, before + up), (before + up, before, 2 * up), "is",
              "the rent increase", ("By how much does the rent go up?", "How big is the rent increase?"), money)


@_computed
def order_total(rng: random.Random) -> Op:
    """Two items and a delivery charge: the order's total."""
    money = _money(rng)
    a_item, b_item = rng.sample(ITEMS, 2)
    a, b, ship = rng.randint(8, 400), rng.randint(8, 400), rng.choice((4, 5, 6, 8, 10, 12))
    q = lambda v: quantity("money", v, money=money)       # noqa: E731
    sentence = (f"The order came to {q(a)} for the {a_item} and {q(b)} for the {b_item}, plus {q(ship)} for "
                f"delivery.")
    return Op("total", sentence, "money", a + b + ship, (a, b, ship), (a + b, a, b, max(a, b) + ship), "was",
              "the order's total", ("What was the order's total, delivery included?",
                                    "How much did the whole order cost with delivery?"), money)


OPERATIONS = (discount, rate_times_count, share, clock_span, date_span, rise, order_total)
"""Every operation; a row draws one or two distinct ones."""


def _ask(q: _Req, rng: random.Random, op: Op) -> None:
    """A score over bins of ``op``'s result, the exact result among traps, and a more-than / at-most pair."""
    unit, v = op.unit, op.value
    say = lambda x: quantity(unit, x, money=op.money)       # noqa: E731
    how_score, how_choice = rng.sample(op.hows, 2)
    q.score(how_score, *_wide_levels(rng, unit, v, op.money))
    lo = UNITS[unit][1][0]
    wrong = [t for t in op.traps if t >= lo]
    near = sorted({v + max(1, v // 3), max(lo, v - max(1, v // 4))} - {v} - set(wrong))
    opts = list(dict.fromkeys(say(x) for x in wrong[:3] + near))[:3]
    q.choice(how_choice, [say(v)] + [o for o in opts if o != say(v)], say(v))
    k = rng.choice([c for c in UNITS[unit][0] if c != v])
    more, less = PAIR_FORMS[0]
    kt = quantity(unit, k, money=op.money)
    q.pair(f"{op.verb.capitalize()} {op.noun} {more.format(k=kt)}?", f"{op.verb.capitalize()} {op.noun} "
           f"{less.format(k=kt)}?", v > k)


def computed(rng: random.Random) -> tuple[dict, dict, list]:
    """One ``computed`` row: a message stating the operands of one or two operations (:data:`OPERATIONS`), and
    4–7 questions about their results (:func:`_ask`), never about a number the text states."""
    ops = [op(rng) for op in rng.sample(OPERATIONS, rng.choice((1, 2)))]
    sentences = [op.sentence for op in ops]
    sentences.insert(rng.randint(0, len(sentences)), rng.choice(CONNECT))
    hello, bye = rng.choice(FRAMES)
    body = "\n\n".join(x for x in (hello, " ".join(sentences), bye, rng.choice(NAMES)) if x)
    q = _Req(rng)
    for op in ops:
        _ask(q, rng, op)
    q.trim(rng.randint(4, 7))
    return {"state": pad(rng, body, paragraphs=(2, 6)), "questions": q.questions}, q.gold, q.twins


@lru_cache(maxsize=None)
def rows(split: str) -> tuple:
    """Seeded rows of a split of ``computed`` (:data:`SPLIT_SIZES`)."""
    rng = random.Random(f"computed:{SPLIT_SEEDS[split]}")
    return tuple(computed(rng) for _ in range(SPLIT_SIZES[split]))
