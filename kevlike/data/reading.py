"""Reading sources written by kevlike (issue 31): texts whose answers must be *read*, not guessed from the topic.

``documents``
    Generated realistic documents — product reviews, incident reports, order messages, deadline letters,
    release notes, quotes against a budget, metrics updates — with exact facts drawn per row, several of them
    numbers (a rating "2 out of 5", a duration given as two clock times, "ordered 3, received 2", a price, a
    date, a percentage, a version), plus distractor sentences that mention the *other* candidates (the cause
    everyone suspected first, the feature the reviewer loved before returning the product): the topical answer
    is wrong. 4–8 questions per request of all three types — yes/no comparisons, choices over bins, scores over
    ordered bins in both scale directions — and *opposite pairs* ("Did the alert fire?" / "Did the alert fail
    to fire?"), returned as coherence twins (``(qa, qb, FLIP)``) that the twin term of the loss ties together.
    With probability :data:`LONG_SHARE` the document is padded with unrelated paragraphs before and after
    (124–334 SmolLM2 tokens in all, median 222, on the validation rows; the ``long`` task option's 4–12
    paragraphs give 129–448 around a ``facts`` state): users send pages. Issue 31 asks for 200–800 tokens;
    :data:`PADDING` holds 16 paragraphs, so longer pages need more padding text.

``quantities``
    Short messages that state 3–5 quantities — durations, days, prices, percentages, GB, counts, distances,
    weights — often two of one unit (the delay and the support call, the refund and the late fee), with score
    questions over ordered bins (either direction), the exact value among the text's other values of its unit,
    and more-than / at-most pairs tied as twins: the number must be read *and* bound to the quantity asked.

``absurd``
    Questions about a property a state plainly lacks — another language, another form (a poem, a recipe), a topic
    far from it, a thing it never mentions — on states from one word to a page (and, in training, empty ones:
    :data:`EMPTY_STATES`), gold *no*; beside them, on the
    same states, the same kinds of question with answer *yes* (its real language, a word it does contain, its own
    kind of text), so a yes/no question is not answered by its wording. Properties are split: every fourth of each
    pool (:func:`pool`) is held out of training and used only by the suite's ``absurd`` split.

Rows are ``(request, gold, twins)``; seeds per split: train 1, validation 2, test 3.
"""

from __future__ import annotations

import random
from functools import lru_cache

from kevlike.data.sources import FLIP

SPLIT_SEEDS = {"train": 1, "validation": 2, "test": 3}
SPLIT_SIZES = {"train": 6000, "validation": 80, "test": 300}
LONG_SHARE = 0.25


def pool(items, wordings: str) -> list:
    """The training part (``train``: all but every fourth item) or the held-out part (``heldout``: every fourth,
    by index) of a pool; ``all``: the whole pool."""
    items = list(items)
    if wordings == "all":
        return items
    return [x for i, x in enumerate(items) if (i % 4 == 3) == (wordings == "heldout")]


def _s(text: str) -> str:
    return text[0].upper() + text[1:]


class _Req:
    """Questions of one request under construction: ``noul``/``choice``/``score`` add a question and its gold;
    ``pair`` adds an opposite pair tied as twins."""

    def __init__(self, rng: random.Random):
        self.rng, self.questions, self.gold, self.twins = rng, {}, {}, []

    def _id(self) -> str:
        return f"q{len(self.questions)}"

    def noul(self, text: str, truth: bool) -> str:
        qid = self._id()
        self.questions[qid] = {"type": "noul", "instructions": text, "criteria": None}
        self.gold[qid] = "true" if truth else "false"
        return qid

    def pair(self, pos: str, neg: str, truth: bool) -> None:
        """``pos`` is true iff ``truth``; ``neg`` asks the opposite. Both asked, in random order, as twins."""
        first = self.rng.random() < 0.5
        a = self.noul(pos if first else neg, truth if first else not truth)
        b = self.noul(neg if first else pos, (not truth) if first else truth)
        self.twins.append((a, b, FLIP))

    def choice(self, text: str, options: list[str], gold: str) -> str:
        opts = list(options)
        self.rng.shuffle(opts)
        qid = self._id()
        self.questions[qid] = {"type": "choice", "instructions": text, "criteria": {o: None for o in opts}}
        self.gold[qid] = gold
        return qid

    def score(self, text: str, levels: list[str], gold: int, reverse: bool | None = None) -> str:
        """``levels`` low → high and the gold index in that order; ``reverse`` (drawn if None) lists them
        high → low (a scale that runs the other way)."""
        if reverse is None:
            reverse = self.rng.random() < 0.35
        if reverse:
            levels, gold = levels[::-1], len(levels) - 1 - gold
        qid = self._id()
        self.questions[qid] = {"type": "score", "instructions": text, "criteria": list(levels)}
        self.gold[qid] = str(gold)
        return qid

    def trim(self, n: int) -> None:
        """Keep at most ``n`` questions, never splitting a twin pair."""
        keep, ids = set(), list(self.questions)
        tied = {q: (a, b) for a, b, _ in self.twins for q in (a, b)}
        order = ids[:]
        self.rng.shuffle(order)
        for q in order:
            group = tied.get(q, (q,))
            if q in keep or len(keep) + len(group) > n:
                continue
            keep.update(group)
        self.questions = {q: v for q, v in self.questions.items() if q in keep}
        self.gold = {q: v for q, v in self.gold.items() if q in keep}
        self.twins = [t for t in self.twins if t[0] in keep]


# --- shared pools -----------------------------------------------------------------------------------

NAMES = ("Ana", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas", "Kemi", "Luis", "Mara",
         "Noor", "Omar", "Priya", "Quinn", "Rosa", "Sam", "Tariq", "Uma", "Victor", "Wen", "Yusuf", "Zoe")
PADDING = (
    "The quarterly newsletter went out on Monday with the usual round-up of team news, the new parking rules and a "
    "reminder that the kitchen fridge is emptied every Friday afternoon.",
    "In other news, the office plants have finally been repotted, and the facilities team asks everyone to stop "
    "leaving coffee cups on the windowsills of the third floor.",
    "Our community garden had a good season: the tomatoes did well, the beans less so, and the volunteers are "
    "planning a small harvest party for the end of the month.",
    "The library will be closed for two days next week while the shelving on the ground floor is replaced; "
    "returns can still be left in the box by the side door.",
    "A reminder about the book club: this month we are reading a novel about a lighthouse keeper, and the "
    "meeting moves to the larger room because more people signed up.",
    "The city marathon will close several streets on Sunday morning, so buses on the river route will be "
    "diverted until early afternoon.",
    "Last weekend's charity bake sale raised enough to repaint the youth centre, and the organisers thanked the "
    "twenty or so people who baked, carried tables and counted coins.",
    "The weather service expects a mild week with some rain on Thursday, followed by a sunny weekend that should "
    "suit the outdoor concert in the park.",
    "Several readers wrote in about the new recycling schedule; the council has promised a clearer leaflet and "
    "a calendar that can be pinned to the fridge.",
    "The museum's new exhibition on old maps opens on the first of the month, with guided tours in the "
    "afternoons and free entry for students on Wednesdays.",
    "On the sports pages: the local under-twelves team won its league on goal difference, and the coach "
    "credited the parents who drove them to every away game.",
    "A short history note: the old mill by the canal was built in the eighteen-sixties, stopped working in the "
    "nineteen-fifties and is now a set of small artists' studios.",
    "Hiking tip of the week: carry more water than you think you need, tell someone your route, and check when "
    "the last bus leaves the trailhead.",
    "The school choir is looking for new members, especially tenors, and rehearses on Tuesday evenings in the "
    "main hall; no audition is needed.",
    "Thanks to everyone who answered the survey about the canteen; the most common request was for more "
    "vegetarian dishes, and the menu will change from next month.",
    "The IT desk will move to the second floor during the refurbishment, and its opening hours stay the same.",
)


def pad(rng: random.Random, body: str, share: float = LONG_SHARE, paragraphs: tuple[int, int] = (4, 12)) -> str:
    """``body`` with ``paragraphs`` (a range) unrelated paragraphs (:data:`PADDING`) placed before and after it,
    with probability ``share`` (else ``body`` as it is): a page in which the sentences that decide the answer sit
    anywhere. ``documents`` rows use 3–7 (as stage 15 trained on them), the ``long`` task option 4–12."""
    if rng.random() >= share:
        return body
    paras = rng.sample(PADDING, rng.randint(*paragraphs))
    k = rng.randint(0, len(paras))
    return "\n\n".join(paras[:k] + [body] + paras[k:])


# --- documents ----------------------------------------------------------------------------------------

PRODUCTS = (("blender", "motor", "jar"), ("vacuum cleaner", "suction", "battery"), ("pair of headphones", "sound", "ear cushions"),
            ("coffee machine", "espresso", "milk frother"), ("office chair", "armrests", "seat cushion"),
            ("e-reader", "screen", "battery"), ("rice cooker", "timer", "inner pot"), ("backpack", "zippers", "straps"),
            ("electric toothbrush", "brush head", "charger"), ("desk lamp", "brightness", "switch"),
            ("robot mower", "cutting", "app"), ("kettle", "handle", "lid"), ("fitness tracker", "heart-rate sensor", "strap"))
STAR_PHRASES = ("I'm giving it {r} out of 5 stars.", "Rating: {r}/5.", "{R} stars out of five from me.",
                "My rating: {r} of 5.", "That's why it only gets {r} stars out of 5.", "Overall {r}/5.")
NUM_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten")


def _review(rng: random.Random, q: _Req) -> str:
    product, good, bad = rng.choice(PRODUCTS)
    r = rng.randint(1, 5)
    returned = rng.random() < (0.7 if r <= 2 else 0.15)
    liked_good = rng.random() < 0.8
    parts = [rng.choice(["I bought this {p} in the spring.", "Bought the {p} for my flat last month.",
                         "We have had this {p} for about six weeks now."]).format(p=product)]
    if liked_good:
        parts.append(rng.choice(["The {g} is honestly excellent, better than on anything I owned before.",
                                 "I really liked the {g}; no complaints there at all."]).format(g=good))
    else:
        parts.append(rng.choice(["Even the {g}, which everyone praises, did nothing for me.",
                                 "I did not like the {g} at all."]).format(g=good))
    if r <= 3:
        parts.append(rng.choice(["But the {b} failed after two weeks and support never replied.",
                                 "The problem is the {b}: it broke on day ten."]).format(b=bad))
    else:
        parts.append(rng.choice(["The {b} works fine too.", "The {b} has held up well so far."]).format(b=bad))
    if returned:
        parts.append(rng.choice(["I sent it back for a refund.", "It went back to the shop and I got my money back.",
                                 "In the end I returned it."]))
    else:
        parts.append(rng.choice(["I'm keeping it.", "It stays in our kitchen for now.", "I decided not to return it."]))
    parts.append(rng.choice(STAR_PHRASES).format(r=r, R=NUM_WORDS[r].capitalize() if rng.random() < 0.5 else str(r)))
    k = rng.randint(2, 4)
    q.noul(rng.choice(["Did the reviewer give {k} or more stars?", "Is the rating at least {k} out of 5?"]).format(k=k), r >= k)
    q.noul(rng.choice(["Is the rating below {k} stars?", "Did the product get fewer than {k} stars?"]).format(k=k), r < k)
    q.score(rng.choice(["How many stars did the reviewer give?", "What is the star rating?"]),
            ["1 star", "2 stars", "3 stars", "4 stars", "5 stars"], r - 1)
    q.score("How satisfied is the reviewer overall?",
            ["very dissatisfied", "dissatisfied", "neutral", "satisfied", "very satisfied"], r - 1)
    q.pair(rng.choice(["Did the reviewer return the {p}?", "Was the {p} sent back?"]).format(p=product),
           rng.choice(["Did the reviewer keep the {p}?", "Is the reviewer keeping the {p}?"]).format(p=product), returned)
    q.noul(rng.choice(["Did the reviewer like the {g}?", "Was the reviewer happy with the {g}?"]).format(g=good), liked_good)
    q.choice("What did the reviewer do with the product?", ["kept it", "returned it"], "returned it" if returned else "kept it")
    q.noul("Would the reviewer recommend the product?", r >= 4)
    return " ".join(parts)


CAUSES = ("an expired TLS certificate", "a configuration change", "a full disk", "a bad deploy of the payments service",
          "a DNS misconfiguration", "an overloaded database", "a network switch failure", "a leaked memory bug")
CAUSE_KEYS = ("expired certificate", "configuration change", "disk full", "bad deploy", "DNS misconfiguration",
              "database overload", "network switch failure", "memory leak")
DURATION_BINS = ("under 15 minutes", "15 to 60 minutes", "1 to 6 hours", "more than 6 hours")


def _clock(minutes: int) -> str:
    return f"{minutes // 60:02d}:{minutes % 60:02d}"


def _incident(rng: random.Random, q: _Req) -> str:
    cause, suspect = rng.sample(range(len(CAUSES)), 2)
    d = rng.choice([rng.randint(3, 14), rng.randint(16, 59), rng.randint(61, 359), rng.randint(361, 900)])
    start = rng.randint(0, 23 * 60 - d - 1) if d < 23 * 60 else 0
    fired = rng.random() < 0.5
    pct = rng.choice([3, 8, 12, 25, 40, 60, 85])
    service = rng.choice(["checkout", "the login page", "the mobile API", "search", "the booking site"])
    if rng.random() < 0.5:
        dur = f"The outage began at {_clock(start)} UTC and service was fully restored at {_clock(start + d)} UTC."
    elif d < 60:
        dur = f"The outage lasted {d} minutes."
    else:
        dur = f"The outage lasted {d // 60} hour{'s' if d >= 120 else ''} and {d % 60} minutes."
    parts = [f"Incident summary for {service}.", dur,
             f"About {pct}% of requests failed during that time.",
             f"At first the on-call engineer suspected {CAUSES[suspect]}, and most of the first hour of the call was "
             f"spent on that theory." if rng.random() < 0.7 else f"{CAUSES[suspect].capitalize()} was ruled out early.",
             f"The root cause turned out to be {CAUSES[cause]}.",
             "The monitoring alert fired within two minutes and paged the on-call engineer." if fired else
             "The monitoring alert did not fire; a customer reported the problem on social media.",
             rng.choice(["A follow-up review is scheduled for Thursday.", "Action items are tracked in the team board."])]
    bin_ = 0 if d < 15 else 1 if d <= 60 else 2 if d <= 360 else 3
    q.score("How long did the outage last?", list(DURATION_BINS), bin_)
    h = rng.choice([1, 2, 6])
    q.noul(f"Did the outage last longer than {h} hour{'s' if h > 1 else ''}?", d > 60 * h)
    q.pair(rng.choice(["Did the monitoring alert fire?", "Was the team alerted by monitoring?"]),
           rng.choice(["Did the monitoring alert fail to fire?", "Did monitoring miss the outage?"]), fired)
    q.noul(f"Was the outage caused by {CAUSES[cause]}?", True)
    q.noul(f"Was the outage caused by {CAUSES[suspect]}?", False)
    opts = rng.sample([i for i in range(len(CAUSES)) if i not in (cause, suspect)], rng.randint(1, 2)) + [cause, suspect]
    q.choice("What caused the outage?", [CAUSE_KEYS[i] for i in opts], CAUSE_KEYS[cause])
    t = rng.choice([10, 20, 50])
    q.noul(f"Did more than {t}% of requests fail?", pct > t)
    q.score("How severe was the impact on requests?", ["minor (under 10% failed)", "moderate (10 to 50% failed)",
                                                        "severe (over 50% failed)"], 0 if pct < 10 else 1 if pct <= 50 else 2)
    return " ".join(parts)


ITEMS = ("mugs", "phone cases", "notebooks", "light bulbs", "towels", "candles", "storage boxes", "pillows")
MONTHS = ("January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December")


def _order(rng: random.Random, q: _Req) -> str:
    item = rng.choice(ITEMS)
    n = rng.randint(2, 6)
    m = rng.choice([n, n, rng.randint(0, n - 1)])
    price = rng.choice([4.5, 7.99, 12.0, 15.25, 22.4, 39.9])
    month = rng.randrange(12)
    due = rng.randint(3, 20)
    arrived = due + rng.choice([-2, -1, 0, 0, 1, 3, 6])
    who = rng.choice(NAMES)
    parts = [f"Hello, this is {who} about order 4{rng.randint(1000, 9999)}.",
             f"I ordered {n} {item} at ${price:.2f} each, and the delivery was promised for {MONTHS[month]} {due}.",
             f"The parcel arrived on {MONTHS[month]} {arrived}" + (f" with only {m} {item} inside." if m < n else
                                                                   f" and all {n} {item} were inside."),
             rng.choice(["The packaging was fine.", "The box was a bit dented but nothing was broken.",
                         "Your courier was very polite."]),
             rng.choice(["Please let me know what you can do.", "I would appreciate a quick answer.", "Thanks in advance."])]
    q.pair(rng.choice(["Did all the ordered items arrive?", "Was the order delivered complete?"]),
           rng.choice(["Are any items missing from the delivery?", "Was the delivery incomplete?"]), m == n)
    miss = n - m
    q.choice("How many items are missing?", ["none", "one", "two", "three or more"],
             ["none", "one", "two"][miss] if miss < 3 else "three or more")
    q.pair("Did the parcel arrive after the promised date?", "Did the parcel arrive by the promised date?", arrived > due)
    total = n * price
    t = rng.choice([20, 50, 100])
    q.noul(f"Did the whole order cost more than ${t}?", total > t)
    q.score("How much did the order cost in total?", ["under $20", "$20 to $50", "$50 to $100", "over $100"],
            0 if total < 20 else 1 if total <= 50 else 2 if total <= 100 else 3)
    k = rng.randint(max(1, n - 2), n + 2)
    q.noul(f"Did the customer order more than {k} {item}?", n > k)
    return " ".join(parts)


def _deadline(rng: random.Random, q: _Req) -> str:
    who = rng.choice(NAMES)
    thing = rng.choice(["tax return", "grant application", "thesis draft", "visa renewal form", "insurance claim",
                        "expense report"])
    month = rng.randrange(12)
    due = rng.randint(5, 25)
    sub = due + rng.choice([-6, -3, -1, 0, 1, 2, 5, 9])
    fee = rng.choice([25, 40, 75, 120])
    late = sub > due
    parts = [f"Dear {who},", f"thank you for your {thing}, which we received on {MONTHS[month]} {sub}.",
             f"The deadline was {MONTHS[month]} {due}.",
             (f"Because it arrived {sub - due} day{'s' if sub - due > 1 else ''} after the deadline, a late fee of "
              f"${fee} has been added to your account." if late else
              "It arrived in time, so no late fee applies, although we usually charge ${} for late submissions.".format(fee)),
             rng.choice(["We will be in touch within ten working days.", "No further action is needed from you now."]),
             "Kind regards, the processing office"]
    q.pair(f"Was the {thing} submitted late?", f"Was the {thing} submitted on time?", late)
    q.noul("Was a late fee charged?", late)
    q.choice(f"When did the {thing} arrive?", ["before the deadline", "on the deadline", "after the deadline"],
             "before the deadline" if sub < due else "on the deadline" if sub == due else "after the deadline")
    q.score("How late was the submission?", ["not late", "1 to 3 days late", "4 or more days late"],
            0 if sub <= due else 1 if sub - due <= 3 else 2)
    return " ".join(parts)


def _version(rng: random.Random, q: _Req) -> str:
    major = rng.randint(1, 4)
    fix = (major, rng.randint(1, 9), rng.randint(0, 9))
    mine = rng.choice([fix, (major, fix[1], max(0, fix[2] - rng.randint(1, 3))), (major, fix[1] - 1, rng.randint(0, 12)),
                       (major, fix[1] + 1, 0), (major, fix[1], fix[2] + rng.randint(1, 4))])
    v = lambda t: ".".join(map(str, t))                                          # noqa: E731
    tool = rng.choice(["the sync client", "our CLI", "the image library", "the database driver", "the VPN app"])
    bug = rng.choice(["the crash on start-up", "the memory leak during uploads", "the wrong time zone in reports",
                      "the login loop on Safari"])
    parts = [f"Release notes for {tool}, version {v(fix)}: fixes {bug}.",
             rng.choice(["Also adds a dark theme.", "Also updates the translations.", "Also speeds up search."]),
             f"Comment from a user: I am running version {v(mine)} and wondered whether I need to update."]
    has = mine >= fix
    q.pair(f"Does the user's version already include the fix for {bug}?", "Does the user need to update to get the fix?", has)
    q.noul(f"Is the user running a version older than {v(fix)}?", mine < fix)
    q.choice(f"How does the user's version compare with {v(fix)}?", ["older", "the same", "newer"],
             "older" if mine < fix else "the same" if mine == fix else "newer")
    return " ".join(parts)


def _budget(rng: random.Random, q: _Req) -> str:
    budget = rng.choice([500, 1000, 2500, 4000, 10000])
    quote = int(budget * rng.choice([0.6, 0.85, 0.97, 1.0, 1.08, 1.3, 1.9]))
    vendor = rng.choice(["the roofer", "the catering company", "the web agency", "the moving firm", "the printer"])
    parts = [f"Quick note on the quote from {vendor}: it came to ${quote:,}.", f"Our budget for this is ${budget:,}.",
             rng.choice(["Their references were good.", "They can start next month.", "The other quotes were slower."])]
    within = quote <= budget
    q.pair("Is the quote within the budget?", "Does the quote exceed the budget?", within)
    r = quote / budget
    q.score("How does the quote compare with the budget?", ["well under budget (more than 10% below)",
                                                             "close to budget (within 10%)",
                                                             "well over budget (more than 10% above)"],
            0 if r < 0.9 else 1 if r <= 1.1 else 2)
    q.noul(f"Is the quote more than ${budget // 2:,}?", quote > budget // 2)
    return " ".join(parts)


METRICS = (("test coverage", "%"), ("battery health", "%"), ("customer satisfaction", "%"), ("conversion rate", "%"),
           ("uptime", "%"))


def _metric(rng: random.Random, q: _Req) -> str:
    name, unit = rng.choice(METRICS)
    before = rng.randint(40, 95)
    after = max(1, min(99, before + rng.choice([-15, -8, -3, 3, 6, 12])))
    team = rng.choice(["the platform team", "the support team", "our shop", "the mobile team"])
    parts = [f"Monthly update from {team}.", f"{_s(name)} went from {before}{unit} last month to {after}{unit} this month.",
             rng.choice(["Hiring is on track.", "The offsite is booked.", "We closed 40 tickets."])]
    up = after > before
    q.pair(f"Did {name} go up?", f"Did {name} go down?", up)
    t = rng.choice([50, 70, 80, 90])
    q.noul(f"Is {name} now above {t}{unit}?", after > t)
    delta = after - before
    q.score(f"How did {name} change?", ["fell a lot (over 5 points)", "fell a little", "rose a little",
                                         "rose a lot (over 5 points)"],
            0 if delta < -5 else 1 if delta < 0 else 2 if delta <= 5 else 3)
    return " ".join(parts)


DOCUMENTS = (_review, _incident, _order, _deadline, _version, _budget, _metric)
# what each kind of document is, for ``absurd``'s questions whose answer is yes ("Is this an incident report?")
DOCUMENT_FORMS = {_review: "a product review", _incident: "an incident report", _order: "a customer message about an order",
                  _deadline: "a letter from an office", _version: "release notes", _budget: "a note about a quote",
                  _metric: "a monthly update"}


def document(rng: random.Random, form: list | None = None) -> tuple[dict, dict, list]:
    """One ``(request, gold, twins)`` row of ``documents`` (module docstring): a document, maybe padded, and 4–8
    of its questions. ``form``, if given, receives the document's kind (:data:`DOCUMENT_FORMS`)."""
    q = _Req(rng)
    kind = rng.choice(DOCUMENTS)
    body = kind(rng, q)
    q.trim(rng.randint(4, 8))
    if form is not None:
        form.append(DOCUMENT_FORMS[kind])
    return {"state": pad(rng, body, paragraphs=(3, 7)), "questions": q.questions}, q.gold, q.twins


# --- quantities -----------------------------------------------------------------------------------------------

# unit -> (the "nice" cut points its scales use, the range values are drawn from)
UNITS = {"minutes": ((5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 240), (3, 300)),
         "days": ((2, 3, 5, 7, 10, 14, 21, 30, 45), (1, 60)),
         "money": ((10, 20, 50, 100, 200, 250, 500, 1000, 1500), (4, 2000)),
         "percent": ((5, 10, 20, 25, 30, 50, 75, 90), (1, 97)),
         "GB": ((5, 10, 20, 50, 100, 200, 250), (1, 400)),
         "people": ((2, 3, 5, 10, 15, 20, 30), (1, 45)),
         "tickets": ((2, 3, 5, 10, 15, 20, 30), (1, 45)),
         "nights": ((2, 3, 5, 7, 10, 14), (1, 21)),
         "km": ((2, 5, 10, 20, 50, 100, 200), (1, 300)),
         "kg": ((1, 2, 5, 10, 20, 30), (1, 40))}
# (unit, "is"/"was", the noun phrase a question names, sentences that state it ({v}: the value with its unit),
#  how-questions); measures of one unit sit in one text, so a question must be bound to its noun, not its unit
MEASURES = (
    ("minutes", "was", "the delay", ("Our flight finally left {v} late.", "The train was delayed by {v}."),
     ("How long was the delay?", "How late did it leave?")),
    ("minutes", "was", "the support call", ("The call with support lasted {v}.", "I spent {v} on the phone with your agent."),
     ("How long was the support call?", "How long did the call with support take?")),
    ("minutes", "was", "the outage", ("The service was down for {v}.", "Customers could not log in for {v}."),
     ("How long did the outage last?", "For how long was the service unavailable?")),
    ("days", "was", "the delivery time", ("Delivery took {v}.", "The parcel needed {v} to reach us."),
     ("How long did delivery take?", "How long was the parcel on its way?")),
    ("days", "is", "the remaining annual leave", ("You have {v} of annual leave left this year.",
                                                  "Your remaining holiday allowance is {v}."),
     ("How much annual leave is left?", "How many days of holiday remain?")),
    ("days", "is", "the free trial", ("The free trial runs for {v}.", "You can use the trial for {v} before paying."),
     ("How long is the free trial?", "How long can the product be tried for free?")),
    ("money", "was", "the refund", ("We have refunded {v} to your card.", "A refund of {v} was issued."),
     ("How much was refunded?", "How big was the refund?")),
    ("money", "was", "the late fee", ("A late fee of {v} was added to the bill.", "The bill now includes a {v} late fee."),
     ("How much was the late fee?", "What late fee was charged?")),
    ("money", "is", "the deposit", ("The deposit is {v}, payable before the keys are handed over.",
                                    "A deposit of {v} is required."),
     ("How much is the deposit?", "What deposit has to be paid?")),
    ("percent", "was", "the discount", ("They offered us a {v} discount.", "The discount came to {v}."),
     ("How big was the discount?", "What discount was offered?")),
    ("percent", "was", "the battery level", ("The battery was at {v} when the phone shut down.",
                                             "It switched itself off with {v} battery left."),
     ("What was the battery level when it shut down?", "How much battery was left when it switched off?")),
    ("percent", "was", "the sales growth", ("Sales grew by {v} this quarter.", "Quarterly sales were up {v}."),
     ("By how much did sales grow?", "How much were sales up this quarter?")),
    ("GB", "was", "the free mobile data", ("{V} of free mobile data were added to the account.",
                                           "As an apology we added {v} of mobile data at no cost."),
     ("How much free mobile data was added?", "How much data was given at no cost?")),
    ("GB", "is", "the laptop's storage", ("The laptop comes with {v} of storage.", "Its disk holds {v}."),
     ("How much storage does the laptop have?", "How big is the laptop's disk?")),
    ("people", "was", "the number of guests", ("{V} came to the party.", "In the end {v} turned up for dinner."),
     ("How many guests came?", "How many people turned up?")),
    ("tickets", "is", "the number of open tickets", ("{V} are still open in the queue.", "The backlog stands at {v}."),
     ("How many tickets are still open?", "How big is the ticket backlog?")),
    ("nights", "is", "the stay", ("The booking is for {v}.", "We will stay {v} at the hotel."),
     ("How many nights is the booking for?", "How long is the hotel stay?")),
    ("km", "is", "the distance to the airport", ("The hotel is {v} from the airport.",
                                                 "From the airport it is {v} to the hotel."),
     ("How far is the hotel from the airport?", "What is the distance between the airport and the hotel?")),
    ("km", "was", "the run", ("On Sunday she ran {v}.", "Her longest run this month was {v}."),
     ("How far did she run?", "How long was the run?")),
    ("kg", "is", "the parcel's weight", ("The parcel weighs {v}.", "The box comes to {v} on the scale."),
     ("How heavy is the parcel?", "What does the parcel weigh?")),
)
FRAMES = (("Hi,", "Thanks,"), ("Hello team,", "Best regards,"), ("Dear customer,", "Kind regards,"),
          ("Quick update:", "More soon."), ("Notes from today:", "That's all for now."), ("", ""))
CONNECT = ("Let me know if anything is unclear.", "Nothing else has changed since my last message.",
           "I have attached the details for your records.", "The rest of the plan stays the same.",
           "Please keep this email for reference.", "We are sorry for the inconvenience.")
UNIT_SINGULAR = {"minutes": "minute", "days": "day", "people": "person", "tickets": "ticket", "nights": "night"}


def quantity(unit: str, v: int, words: bool = False, money: str = "EUR {v}", spoken: bool = False) -> str:
    """``v`` of ``unit`` as a text writes it: "45 minutes", "2 hours", "EUR 120", "30%", "12 GB", "three nights".

    ``money``: the currency's format (one of :data:`MONEY_FORMATS`, ``{v}`` the amount); ``spoken``: minutes that
    have a spoken form say it ("half an hour", "an hour and a half": :data:`SPOKEN_MINUTES`)."""
    if unit == "minutes" and spoken and v in SPOKEN_MINUTES:
        return SPOKEN_MINUTES[v]
    if unit == "minutes" and v >= 90 and v % 60 == 0:
        return f"{v // 60} hours"
    if unit == "money":
        return money.format(v=v)
    if unit == "percent":
        return f"{v}%"
    if unit in ("GB", "km", "kg"):
        return f"{v} {unit}"
    number = NUM_WORDS[v] if words and v < len(NUM_WORDS) else str(v)
    return f"{number} {UNIT_SINGULAR[unit] if v == 1 else unit}"


def _levels(rng: random.Random, unit: str, v: int) -> tuple[list[str], int]:
    """3–5 ordered levels over ``unit`` cut where no stated value sits on a boundary, and ``v``'s level (every
    unit has at least 6 cut points, so 5 remain besides ``v``)."""
    cuts = [c for c in UNITS[unit][0] if c != v]
    k = rng.randint(2, min(4, len(cuts)))
    cut = sorted(rng.sample(cuts, k))
    q = lambda c: quantity(unit, c)      # noqa: E731
    levels = [rng.choice(["less than {}", "under {}"]).format(q(cut[0]))]
    levels += [f"{q(a)} to {q(b)}" for a, b in zip(cut, cut[1:])]
    levels.append(rng.choice(["more than {}", "over {}"]).format(q(cut[-1])))
    return levels, sum(v > c for c in cut)


def quantities(rng: random.Random) -> tuple[dict, dict, list]:
    """One ``quantities`` row: a message stating 3–5 quantities, two or more often of one unit (minutes of a delay
    and of a call, EUR of a refund and of a fee), and 4–7 questions about one or two of them: a score over
    ordered bins (either direction), the exact value among the text's other values of that unit and near ones,
    and a more-than / at-most pair tied as twins. Reading the number is not enough: it must be the asked one."""
    return _quantity_row(rng, wide=False)


def _quantity_row(rng: random.Random, wide: bool) -> tuple[dict, dict, list]:
    """A :func:`quantities` row, or with ``wide`` a :func:`numbers` row (the draws ``wide`` adds come in their own
    places, so that ``quantities`` rows stay what they were)."""
    money = rng.choice(MONEY_FORMATS) if wide else "EUR {v}"
    measures = WIDE_MEASURES if wide else MEASURES
    target = rng.choice(measures)
    same = [m for m in measures if m[0] == target[0] and m is not target]
    others = [m for m in measures if m[0] != target[0]]
    if wide:
        chosen = [target] + (rng.sample(same, min(len(same), rng.randint(1, 2))) if same and rng.random() < 0.7
                             else [])
        chosen = list(dict.fromkeys(chosen + rng.sample(others, rng.randint(1, 3))))[:5]
    else:
        chosen = [target] + (same if rng.random() < 0.7 else []) + rng.sample(others, rng.randint(1, 3))
        chosen = list(dict.fromkeys(chosen))[:5]
    values: dict = {}
    for m in chosen:
        mlo, mhi = UNITS[m[0]][1]
        while True:
            v = rng.randint(mlo, mhi)
            if m[0] == "minutes" and v >= 90:
                v -= v % 30
            if wide and m[0] == "minutes" and rng.random() < 0.3:
                v = rng.choice(tuple(SPOKEN_MINUTES))         # a duration the text may say in words
            if v not in values.values():
                break
        values[m] = v
    sentences = []
    for m in chosen:
        words = rng.random() < 0.4
        text = quantity(m[0], values[m], words=words, money=money, spoken=wide and rng.random() < 0.5)
        sentences.append(rng.choice(m[3]).format(v=text, V=_s(text)))
    rng.shuffle(sentences)
    sentences.insert(rng.randint(0, len(sentences)), rng.choice(CONNECT))
    hello, bye = rng.choice(FRAMES)
    body = "\n\n".join(x for x in (hello, " ".join(sentences), bye, rng.choice(NAMES)) if x)
    q = _Req(rng)
    for m in [target] + [x for x in chosen[1:] if rng.random() < 0.4][:1]:
        unit, verb, noun, _, hows = m
        v, ulo = values[m], UNITS[unit][1][0]
        how_score, how_choice = rng.sample(hows, 2)
        q.score(how_score, *(_wide_levels(rng, unit, v, money) if wide else _levels(rng, unit, v)))
        near = {max(ulo, v // 2), v + max(1, v // 3), max(1, v - max(1, v // 4)), v * 2}
        near |= {values[x] for x in chosen if x[0] == unit}
        say = lambda x: quantity(unit, x, money=money)       # noqa: E731  (digits: one-to-one)
        opts = [say(x) for x in sorted(near - {v})]
        rng.shuffle(opts)
        q.choice(how_choice, [say(v)] + opts[:3], say(v))
        k = rng.choice([c for c in UNITS[unit][0] if c != v])
        more, less = (rng.choice(PAIR_FORMS) if wide else PAIR_FORMS[0])
        kt = quantity(unit, k, money=money, spoken=wide and rng.random() < 0.3)
        q.pair(f"{verb.capitalize()} {noun} {more.format(k=kt)}?", f"{verb.capitalize()} {noun} {less.format(k=kt)}?",
               v > k)
    q.trim(rng.randint(4, 7))
    return {"state": pad(rng, body, paragraphs=(2, 6)), "questions": q.questions}, q.gold, q.twins


# --- numbers: quantities in the wider forms people write them -------------------------------------------------

# one currency per text, in the forms invoices and emails use
MONEY_FORMATS = ("EUR {v}", "€{v}", "${v}", "USD {v}", "£{v}", "GBP {v}", "{v} euros", "{v} dollars", "{v} pounds")
SPOKEN_MINUTES = {15: "a quarter of an hour", 30: "half an hour", 45: "three quarters of an hour", 60: "an hour",
                  90: "an hour and a half", 120: "two hours", 180: "three hours", 240: "four hours"}
# the lowest, middle and highest level's forms: {a} / {b} a cut point as the text writes it; no value sits on a
# cut, so "up to" / "or more" (which include the cut) read the same as "under" / "over"
LOW_FORMS = ("less than {a}", "under {a}", "below {a}", "up to {a}", "at most {a}", "{a} or less")
MID_FORMS = ("{a} to {b}", "between {a} and {b}", "from {a} to {b}")
HIGH_FORMS = ("more than {b}", "over {b}", "above {b}", "{b} or more", "at least {b}")
# the more-than / at-most twin questions' wordings ({k}: a cut point); ``quantities`` asks the first only
PAIR_FORMS = (("more than {k}", "{k} or less"), ("over {k}", "no more than {k}"), ("at least {k}", "under {k}"))
# a level below every drawn value (values start at 1): the scale's "none" end, never gold
ZERO_LEVELS = {"money": ("nothing", "no money at all"), "people": ("nobody", "no one"), "tickets": ("none", "zero"),
               "GB": ("none", "no data"), "days": ("none", "zero days"), "nights": ("none", "zero nights")}
# counts small enough to be asked one value per level ("one", "two", "three or more")
COUNT_UNITS = ("people", "tickets", "nights", "days")
WIDE_MEASURES = MEASURES + (
    ("minutes", "is", "the commute", ("My commute is {v} each way.", "Getting to the office takes me {v}."),
     ("How long is the commute?", "How long does the trip to the office take?")),
    ("days", "is", "the notice period", ("Either side can end the contract with {v} notice.",
                                         "The notice period is {v}."),
     ("How long is the notice period?", "How much notice must be given?")),
    ("money", "was", "the rent increase", ("From next month the rent goes up by {v}.", "The monthly rent rises by {v}."),
     ("By how much does the rent go up?", "How big is the rent increase?")),
    ("money", "is", "the repair quote", ("The garage quoted {v} for the repair.", "Fixing it will cost {v}, the shop says."),
     ("How much will the repair cost?", "What was the repair quoted at?")),
    ("people", "was", "the number of applicants", ("{V} applied for the position.",
                                                   "We received applications from {v}."),
     ("How many people applied?", "How many applicants were there?")),
)


def _span(a: str, b: str, form: str) -> str:
    """A middle level from two cut points' texts in ``form`` ("between {a} and {b}"); the unit is said once
    ("between 15 and 60 minutes") when both are a number and the same unit word."""
    wa, wb = a.rsplit(" ", 1), b.rsplit(" ", 1)
    if len(wa) == len(wb) == 2 and wa[1] == wb[1] and wa[0].isdigit() and wb[0].isdigit():
        return form.format(a=wa[0], b=b)
    return form.format(a=a, b=b)


def _wide_levels(rng: random.Random, unit: str, v: int, money: str) -> tuple[list[str], int]:
    """Like :func:`_levels`, in the wider forms people write scales in: any of :data:`LOW_FORMS` /
    :data:`MID_FORMS` / :data:`HIGH_FORMS`, the text's currency, spoken durations ("between a quarter of an hour
    and an hour"), sometimes a "none" level below all (:data:`ZERO_LEVELS`, never gold), and for small counts one
    value per level ("one night", "two nights", "three nights or more"). Returns the levels low → high and ``v``'s index."""
    if unit in COUNT_UNITS and v <= 6 and rng.random() < 0.5:
        start = rng.randint(max(1, v - 3), v)
        top = rng.randint(max(v + 1, start + 2), start + 4)
        words = rng.random() < 0.5
        say = lambda n: quantity(unit, n, words=words)      # noqa: E731  ("three nights", "3 nights")
        levels = [say(n) for n in range(start, top)] + [f"{say(top)} or more"]
        if start > 1:
            levels[0] = f"{say(start)} or fewer" if rng.random() < 0.5 else f"at most {say(start)}"
        return levels, v - start
    cuts = [c for c in UNITS[unit][0] if c != v]
    cut = sorted(rng.sample(cuts, rng.randint(2, min(4, len(cuts)))))
    spoken = unit == "minutes" and all(c in SPOKEN_MINUTES for c in cut) and rng.random() < 0.6
    q = lambda c: quantity(unit, c, money=money, spoken=spoken)      # noqa: E731
    mid = rng.choice(MID_FORMS)
    levels = [rng.choice(LOW_FORMS).format(a=q(cut[0]))]
    levels += [_span(q(a), q(b), mid) for a, b in zip(cut, cut[1:])]
    levels.append(rng.choice(HIGH_FORMS).format(b=q(cut[-1])))
    gold = sum(v > c for c in cut)
    if unit in ZERO_LEVELS and len(levels) < 5 and rng.random() < 0.3:
        levels, gold = [rng.choice(ZERO_LEVELS[unit])] + levels, gold + 1
    return levels, gold


def numbers(rng: random.Random) -> tuple[dict, dict, list]:
    """One ``numbers`` row: :func:`quantities` with the quantities in the wider forms people write them — one
    currency per text among :data:`MONEY_FORMATS`, durations sometimes spoken ("half an hour") in the text, in
    the options or in both, more measures (:data:`WIDE_MEASURES`), and scales in :func:`_wide_levels`' forms —
    so that a number is read the way a page states it and a level the way a person writes it."""
    return _quantity_row(rng, wide=True)


# --- absurd -------------------------------------------------------------------------------------------------

SHORT_STATES = ("hi", "ok", "thanks!", "see you tomorrow", "The invoice was paid on time.", "Meeting moved to 3pm.",
                "Can you send me the report?", "Lunch?", "The printer on floor two is jammed again.", "yes",
                "Happy birthday, Sam!", "Order shipped.", "Please call me back when you can.", "Done.",
                "The train is delayed by ten minutes.", "I love this song.", "Where is the spare key?", "Password reset.",
                "Running late, start without me.", "The cat knocked the plant over.")
LANGUAGES = ("French", "German", "Spanish", "Chinese", "Japanese", "Russian", "Italian", "Arabic", "Portuguese",
             "Korean", "Dutch", "Hindi", "Turkish", "Swedish", "Greek", "Polish")
FORMS = ("a poem", "a recipe", "a legal contract", "song lyrics", "a weather forecast", "a scientific abstract",
         "a football match report", "a menu", "a horoscope", "a job advertisement", "a bedtime story",
         "a shopping list", "an obituary", "a knitting pattern", "a wedding invitation", "a train timetable")
TOPICS = ("quantum physics", "ancient Egypt", "cooking pasta", "football", "volcanoes", "knitting", "astronomy",
          "horse racing", "the French Revolution", "dinosaurs", "opera", "tax law", "marine biology", "chess",
          "space travel", "gardening")
ENTITIES = ("a dog", "Paris", "a giraffe", "the moon", "a bicycle", "an elephant", "Napoleon", "a volcano", "a piano",
            "a submarine", "the Eiffel Tower", "a penguin", "a dragon", "a lighthouse", "Mount Everest", "a violin")
LANG_Q = ("Is this text written in {x}?", "Is the text in {x}?", "Was this written in {x}?", "Is the language of the text {x}?")
FORM_Q = ("Is this text {x}?", "Is this {x}?", "Does the text read as {x}?", "Is the text an example of {x}?")
TOPIC_Q = ("Is this text about {x}?", "Does the text discuss {x}?", "Is {x} the subject of this text?",
           "Is the text concerned with {x}?")
ENTITY_Q = ("Does the text mention {x}?", "Is {x} mentioned in the text?", "Does the text talk about {x}?",
            "Does {x} appear in the text?")
WORD_Q = ("Does the text contain the word \"{x}\"?", "Is the word \"{x}\" used in the text?",
          "Does the text mention \"{x}\"?")
STOPWORDS = frozenset("the a an and or but to of in on at for with by from is are was were be been it this that "
                      "these those i you he she we they me my your our their its as if so not no yes do did does "
                      "have has had will would can could should just than then there here what which who when where "
                      "how all any some more most very also about into out up down over again only".split())


EMPTY_STATES = ("", " ", "\n", "  \n\t")
"""States with no text at all (the wire accepts them: a question may carry its own context). Training rows only:
the suite's absurd split and every validation / test row are drawn as before they were added."""
EMPTY_SHARE = 0.06


def _state_text(rng: random.Random, split: str) -> tuple[str, str | None]:
    """A state and, for a generated document, its kind of text (else None); a training row's state is one of
    :data:`EMPTY_STATES` with probability :data:`EMPTY_SHARE` (an empty text is in no language, of no form, about
    nothing and mentions nothing: every question on it has gold *no*)."""
    if split == "train" and rng.random() < EMPTY_SHARE:
        return rng.choice(EMPTY_STATES), None
    r = rng.random()
    if r < 0.35:
        return rng.choice(SHORT_STATES), None
    if r < 0.65:
        from kevlike.data import facts
        return rng.choice(facts.rows(split))[0]["state"], None
    form = []
    return document(rng, form)[0]["state"], form[0]


def absurd(rng: random.Random, split: str, wordings: str = "train") -> tuple[dict, dict, list]:
    """One ``(request, gold, twins)`` row of ``absurd`` (module docstring): 2–5 questions on one state, about
    three in five with gold *no* (a property the state lacks), the rest *yes* (English; a word it contains)."""
    state, form = _state_text(rng, split)
    q = _Req(rng)
    if form is not None and rng.random() < 0.5:
        q.noul(rng.choice(FORM_Q).format(x=form), True)
    low = state.lower()
    words = [w.strip(".,!?;:\"'()") for w in state.split()]
    content = [w for w in words if len(w) > 3 and w.lower() not in STOPWORDS and w.isalpha()]
    for _ in range(rng.randint(2, 5)):
        kind = rng.random()
        if kind < 0.25:
            x = rng.choice(pool(LANGUAGES, wordings))
            q.noul(rng.choice(LANG_Q).format(x=x), False)
        elif kind < 0.4:
            q.noul(rng.choice(LANG_Q).format(x="English"), bool(state.strip()))    # an empty text is in none
        elif kind < 0.55:
            q.noul(rng.choice(FORM_Q).format(x=rng.choice(pool(FORMS, wordings))), False)
        elif kind < 0.7:
            q.noul(rng.choice(TOPIC_Q).format(x=rng.choice(pool(TOPICS, wordings))), False)
        else:
            ents = [e for e in pool(ENTITIES, wordings) if e.split()[-1].lower() not in low]
            if content and rng.random() < 0.45:
                q.noul(rng.choice(WORD_Q).format(x=rng.choice(content)), True)
            elif ents:
                q.noul(rng.choice(ENTITY_Q).format(x=rng.choice(ents)), False)
    seen, keep = set(), {}
    for qid, v in q.questions.items():          # a repeated question is asked once
        if v["instructions"] not in seen:
            seen.add(v["instructions"])
            keep[qid] = v
    return {"state": state, "questions": keep}, {k: q.gold[k] for k in keep}, []


@lru_cache(maxsize=None)
def rows(source: str, split: str) -> tuple:
    """Seeded rows of a split of ``documents``, ``quantities``, ``numbers`` or ``absurd`` (:data:`SPLIT_SIZES`); ``absurd``'s training and
    validation rows draw training properties, its test rows held-out ones."""
    rng = random.Random(f"{source}:{SPLIT_SEEDS[split]}")
    if source == "documents":
        return tuple(document(rng) for _ in range(SPLIT_SIZES[split]))
    if source == "quantities":
        return tuple(quantities(rng) for _ in range(SPLIT_SIZES[split]))
    if source == "numbers":
        return tuple(numbers(rng) for _ in range(SPLIT_SIZES[split]))
    if source == "absurd":
        w = "heldout" if split == "test" else "train"
        return tuple(absurd(rng, split, w) for _ in range(SPLIT_SIZES[split]))
    raise ValueError(f"unknown reading source {source!r}")
