"""``rubrics``: score questions whose levels are *described* — "Partial outage: some users could not use it" — on
texts that state one fact placing them at exactly one level (issue 31: score questions are the weakest type).

Users write scales as rubrics: each level a name and a criterion, not a number or a bin. A model that answers the
topic ("an outage report, so: severe") misses them; the criterion must be matched against what the text says ("pages
loaded slowly, but everyone could keep working"). Each row is a short message (an incident note, a project update,
a delivery complaint, a review, an RSVP, a security notice, a travel notice) stating the facts of one or two
:data:`SCALES` (two only where they make one coherent text: :func:`compatible`), among sentences that mention other
levels of the same scale about *something else* (last month's outage, the parcel before this one): the decisive
sentence must be bound to what is asked. Its 4–7 questions:

- a **score** over the scale's levels, written in one of :data:`LEVEL_FORMATS` ("Degraded: …", "degraded (…)", the
  criterion alone), low → high or reversed (a scale that runs the other way), the question sometimes naming the
  scale's ends;
- a **choice** among the levels' criteria, unordered;
- an **opposite pair** of yes/no questions at one cut of the scale ("Were any users unable to use the service?" /
  "Could every user still use the service?"), tied as coherence twins;
- a yes/no question naming one level ("Was the problem only cosmetic?"), gold *yes* iff it is the text's level.

Rows are ``(request, gold, twins)`` like :mod:`kevlike.data.reading`'s; seeds per split: train 1, validation 2,
test 3. The rubrics are the team's own. None rates urgency or time pressure: the held-out ``sys1_phishing_email``
source's score question does (a described 0–3 urgency scale), and the generalization suite's held-out score figure
must stay a measure of an unseen task (tests/test_rubrics.py checks that no wording is shared).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from kevlike.data.reading import FRAMES, NAMES, _Req, pad

SPLIT_SEEDS = {"train": 1, "validation": 2, "test": 3}
SPLIT_SIZES = {"train": 4000, "validation": 80, "test": 300}


@dataclass(frozen=True)
class Level:
    """One level of a rubric: ``name`` ("partial outage"), ``criterion`` ("some users could not use it"), ``facts``:
    sentences that place a text at this level, ``others``: sentences that mention this level about something
    else (a distractor that must not count), ``ask``: a yes/no question true exactly at this level. Texts may hold
    ``{t}`` / ``{T}``: the scale's subject (:attr:`Scale.subjects`), lower / capitalised."""

    name: str
    criterion: str
    facts: tuple[str, ...]
    others: tuple[str, ...]
    ask: str


@dataclass(frozen=True)
class Scale:
    """A rubric: ``levels`` low → high; ``asks``: ways to ask for the level (``{lo}`` / ``{hi}`` are filled with the
    end levels' names where a wording names the ends); ``cuts``: ``(k, at_least, below)`` yes/no questions true
    iff the level is ≥ ``k`` / < ``k``; ``kinds``: the messages it fits (for pairing two scales in one text);
    ``subjects``: what ``{t}`` names in its texts (a task: "the data migration"), one drawn per row."""

    name: str
    asks: tuple[str, ...]
    levels: tuple[Level, ...]
    cuts: tuple[tuple[int, str, str], ...]
    kinds: frozenset
    subjects: tuple[str, ...] = ("",)


L = Level
SCALES: tuple[Scale, ...] = (
    Scale("service availability", (
        "How severe was the incident for users?", "Rate how much service availability was affected.",
        "Rate the outage's severity, from {lo} to {hi}.", "How badly could users use the service?"), (
        L("cosmetic", "a visual flaw, everything worked", (
            "A button was misaligned on the settings page, but everything worked.",
            "The only problem users saw was a typo on the login screen; nobody was blocked.",
            "Some icons showed in the wrong colour for a while; all features kept working."),
          ("The redesign in spring had a few visual glitches.",), "Was the problem only cosmetic?"),
        L("degraded", "slow or flaky, but usable", (
            "Pages loaded slowly for about an hour, but everyone could keep working.",
            "Some requests failed on the first try and worked on retry; the service stayed up for everyone.",
            "Search was sluggish all morning, though it still returned results for everyone."),
          ("Last week's slowdown was annoying but harmless.",), "Was the service degraded but still usable?"),
        L("partial outage", "some users could not use it", (
            "Customers in one region could not log in for two hours; everyone else was fine.",
            "About a third of users got errors and could not check out; the rest were unaffected.",
            "App users could not get in for two hours; everyone on the website was fine."),
          ("The outage in March only hit one data centre.",), "Were only some users cut off?"),
        L("full outage", "nobody could use it", (
            "The whole service was down: nobody could log in for three hours.",
            "Every customer saw an error page; nothing worked until the rollback.",
            "All systems were unreachable for the whole afternoon."),
          ("Unlike this time, the outage two years ago took everything down.",),
          "Was the service down for everyone?"),
    ), ((2, "Were any users unable to use the service?", "Could every user still use the service?"),
        (3, "Was the service down for all users?", "Could at least some users still use the service?")),
        frozenset({"incident", "update"})),
    Scale("damage", (
        "How damaged was the item when it arrived?", "Rate the condition the item arrived in.",
        "Rate the damage, from {lo} to {hi}.", "How serious is the damage described?"), (
        L("none", "arrived in perfect condition", (
            "The item arrived in perfect condition.", "Everything was intact and works as it should.",
            "Not a scratch on it; it works fine."),
          ("The outer box looked fine, for what it's worth.",), "Did it arrive in perfect condition?"),
        L("cosmetic", "scratched or dented, works fine", (
            "There is a small scratch on the side, but it works perfectly.",
            "The corner is a little dented; it still works as it should.",
            "The paint is scuffed in one spot; otherwise it works fine."),
          ("My last order came scuffed, which I did not mind.",),
          "Is there surface damage but no loss of function?"),
        L("partly broken", "one part does not work", (
            "The main unit works, but the lid is cracked and no longer closes.",
            "It turns on, but one of the buttons does nothing.",
            "Most of it works; the charger, though, is broken."),
          ("My friend's came with a broken part.",), "Does one part fail while the rest works?"),
        L("unusable", "does not work at all", (
            "It arrived shattered and cannot be used at all.", "It does not turn on at all; it is completely dead.",
            "The frame snapped in two, so it is useless."),
          ("The previous one I bought from another shop was dead on arrival.",),
          "Is the item completely unusable?"),
    ), ((2, "Is any part of the item not working?", "Does every part of the item work?"),
        (1, "Did the item arrive with any damage or fault?", "Did the item arrive in perfect condition?")),
        frozenset({"delivery", "review"})),
    Scale("progress", (
        "How far along is {t}?", "Rate the progress of {t}.",
        "Where does {t} stand, from {lo} to {hi}?", "How close is {t} to being finished?"), (
        L("not started", "no work done yet", (
            "We have not started on {t} yet.", "Work on {t} has not begun; it is still in the backlog.",
            "Nobody has picked up {t} so far."),
          ("Another team's migration had not even started this time last month.",),
          "Is work on {t} yet to begin?"),
        L("in progress", "being worked on", (
            "We are about halfway through {t}.", "The team is working on {t} this week.",
            "Work on {t} began on Monday and is ongoing."),
          ("Another team's project is still in progress.",), "Is {t} under way but unfinished?"),
        L("in review", "finished, waiting for approval", (
            "{T} is done and waiting for sign-off.", "{T} is finished and now with the reviewers.",
            "{T} is built; we are waiting for approval before we release it."),
          ("Our draft for the last project sat in review for weeks.",),
          "Is {t} finished but waiting for approval?"),
        L("done", "approved and delivered", (
            "{T} was approved and delivered on Tuesday.", "{T} is signed off and already live.",
            "All of {t} is done, signed off and shipped."),
          ("Another team finished its first phase back in May.",), "Has {t} been signed off and delivered?"),
    ), ((1, "Has any work been done on {t}?", "Has work on {t} not started yet?"),
        (3, "Has {t} been approved and delivered?", "Is {t} still waiting on work or approval?")),
        frozenset({"update"}),
        ("the invoice export", "the website redesign", "the data migration", "the onboarding guide",
         "the new search page", "the office move plan")),
    Scale("attendance", (
        "How likely is the person to attend?", "Rate how firmly the reply commits to coming.",
        "Will they come? Rate from {lo} to {hi}.", "How certain is the attendance?"), (
        L("declined", "will not come", (
            "I'm sorry, but I won't be able to come.", "Unfortunately I have to decline; I'll be away that week.",
            "Count me out this time, I can't make it."),
          ("My brother can't make it, sadly.",), "Did they decline?"),
        L("unlikely", "probably not", (
            "I probably won't make it, but I'll let you know if that changes.",
            "It looks unlikely that I can come.", "I doubt I'll be able to join."),
          ("Last year I wasn't sure I'd come until the last week.",), "Is their coming unlikely but not ruled out?"),
        L("likely", "probably, not confirmed", (
            "I should be able to come, but I can't promise yet.", "I'll most likely be there.",
            "Probably yes; I just need to check one thing first."),
          ("My partner will most likely be there.",), "Is their coming likely but not confirmed?"),
        L("confirmed", "definitely coming", (
            "Yes, I'll definitely be there!", "Count me in; I've already booked my train.",
            "I confirm that I will attend."),
          ("My sister has already confirmed she'll be there.",), "Have they confirmed they will come?"),
    ), ((2, "Is the person more likely to come than not?", "Is the person more likely to stay away?"),
        (3, "Has the person firmly committed to coming?", "Is the person's coming still uncertain or ruled out?")),
        frozenset({"rsvp"})),
    Scale("data exposure", (
        "How serious is the data exposure described?", "Rate the sensitivity of the data that was exposed.",
        "Rate the exposure, from {lo} to {hi}.", "How much sensitive data got out?"), (
        L("none", "no data exposed", (
            "No data was accessed or exposed.", "The logs show the attacker never reached any data.",
            "Nothing left our systems."),
          ("A similar attempt last year was stopped before it reached any data.",), "Did all data stay safe?"),
        L("internal", "internal documents only", (
            "Only internal meeting notes were visible, no customer data.",
            "An internal wiki page was shared by mistake; it held no personal data.",
            "Some staff-only planning documents were exposed, but no customer data."),
          ("The leak last year only involved internal notes.",),
          "Were internal documents, but no customer data, exposed?"),
        L("contact details", "customer names or email addresses", (
            "Customer names and email addresses were exposed, but no passwords or payment data.",
            "A list of customer email addresses was leaked; passwords and cards were not affected.",
            "The attacker downloaded names and phone numbers of customers, nothing more."),
          ("Another company lost customer emails in a similar attack.",),
          "Were contact details, but no passwords or card numbers, exposed?"),
        L("credentials or payment", "passwords or card numbers", (
            "Passwords and card numbers of customers were exposed.",
            "The attacker obtained customers' payment card details.",
            "Customer passwords were leaked in plain text."),
          ("The breach we read about at another firm involved card numbers.",),
          "Were passwords or payment details exposed?"),
    ), ((2, "Was any customer data exposed?", "Did all customer data stay private?"),
        (3, "Were passwords or card numbers exposed?", "Did passwords and card numbers stay safe?")),
        frozenset({"security"})),
    Scale("travel disruption", (
        "How disrupted is the trip?", "Rate the disruption to the journey.",
        "Rate the disruption, from {lo} to {hi}.", "How badly is the journey affected?"), (
        L("on time", "running as planned", (
            "Your train is running on time.", "The flight is scheduled to leave as planned.",
            "There are no changes to your journey."),
          ("The outbound trip went as planned.",), "Is the trip running as planned?"),
        L("short delay", "delayed by less than an hour", (
            "Your train is running about 20 minutes late.", "Departure is pushed back by half an hour.",
            "The bus will leave a few minutes late."),
          ("Yesterday's service was a little late.",), "Is it running late, but by less than an hour?"),
        L("long delay", "delayed by an hour or more", (
            "Your flight is delayed by four hours.", "The ferry will now leave in the evening, five hours late.",
            "Departure has been moved back by most of the day."),
          ("Other passengers faced long delays last week.",), "Is it delayed by an hour or more, but still going?"),
        L("cancelled", "not going at all", (
            "Your flight has been cancelled.", "The train will not run today.",
            "This connection is cancelled; no replacement is available."),
          ("Some flights to other cities were cancelled.",), "Has the trip been cancelled?"),
    ), ((2, "Is the journey delayed by an hour or more, or cancelled?", "Is the journey at most a little late?"),
        (1, "Is the journey affected at all?", "Is everything running as planned?")),
        frozenset({"travel"})),
    Scale("recommendation", (
        "How strongly does the reviewer recommend it?", "Rate the reviewer's recommendation.",
        "Would they recommend it? Rate from {lo} to {hi}.", "How positive is the verdict?"), (
        L("avoid", "tells others not to buy it", (
            "Do not buy this; you will regret it.", "Save your money and look elsewhere.",
            "I would tell everyone to avoid it."),
          ("My friend warned me off a different brand.",), "Does the reviewer tell people not to buy it at all?"),
        L("mixed", "only with reservations", (
            "It's fine if you find it on sale, but I wouldn't pay full price.",
            "Some will like it; I have mixed feelings.", "Worth it only if you can live with its flaws."),
          ("The older model got mixed reviews.",), "Is the recommendation only with reservations?"),
        L("positive", "a good choice", (
            "It's a good choice and I'd recommend it.", "I'm happy with it and would suggest it to friends.",
            "A solid buy overall."),
          ("My neighbour liked his.",), "Is it recommended, but without strong enthusiasm?"),
        L("enthusiastic", "buy it without hesitation", (
            "Buy it now, it's the best thing I've owned!", "An absolute must-have; I'd buy it again in a heartbeat.",
            "Stop reading reviews and just get it, it's brilliant."),
          ("The store clerk was very enthusiastic about it.",), "Is the verdict an enthusiastic must-buy?"),
    ), ((2, "Does the reviewer recommend it without reservations?",
         "Does the reviewer have reservations about it or advise against it?"),
        (3, "Does the reviewer urge everyone to buy it at once?",
         "Is the verdict short of urging everyone to buy it?")),
        frozenset({"review"})),
)
SCALE_NAMES = tuple(s.name for s in SCALES)
# how the levels of a score question are written ({n}: name, {c}: criterion); mixed per question, as users do
LEVEL_FORMATS = ("{N}: {c}", "{n} ({c})", "{C}", "{N} - {c}")
OPENERS = {
    "update": ("Weekly update:", "Status update:", "Hi all,"),
    "incident": ("Incident summary:", "Post-incident note:", "Hi team,"),
    "security": ("Security notice:", "Dear user,"),
    "delivery": ("Hello,", "Hi there,", "To the shop:"), "review": ("", "My review:"),
    "rsvp": ("Hi!", "Dear hosts,", "Hello,"), "travel": ("Travel update:", "Dear passenger,", "Notice:"),
}
# closing sentences by who writes: a company or team, or a customer or guest
FILLER = {"company": ("Thanks for your patience.", "More details will follow.", "We appreciate your understanding."),
          "person": ("Let me know if you have questions.", "I hope the rest of your week goes well.",
                     "Have a good day.")}
WRITER = {"update": "company", "incident": "company", "security": "company", "travel": "company",
          "delivery": "person", "review": "person", "rsvp": "person"}


def compatible(a: str, ga: int, b: str, gb: int) -> bool:
    """Whether level ``ga`` of scale ``a`` and ``gb`` of ``b`` make one coherent text: a review that recommends
    the item (positive or enthusiastic) does not say it arrived broken or unusable."""
    levels = {a: ga, b: gb}
    return not (levels.get("recommendation", 0) >= 2 and levels.get("damage", 0) >= 2)


def _cap(s: str) -> str:
    return s[0].upper() + s[1:]


def _fmt(level: Level, form: str) -> str:
    return form.format(n=level.name, N=_cap(level.name), c=level.criterion, C=_cap(level.criterion))


def rubric(rng: random.Random) -> tuple[dict, dict, list]:
    """One ``rubrics`` row (module docstring): a message placing the text at one level of one or two scales, with
    distractor sentences about other levels of the same scale, and 4–7 questions."""
    first = rng.choice(SCALES)
    kind = rng.choice(sorted(first.kinds))
    partners = [s for s in SCALES if s is not first and kind in s.kinds]
    scales = [first] + ([rng.choice(partners)] if partners and rng.random() < 0.5 else [])
    golds = [rng.randrange(len(s.levels)) for s in scales]
    while len(scales) == 2 and not compatible(scales[0].name, golds[0], scales[1].name, golds[1]):
        golds[1] = rng.randrange(len(scales[1].levels))
    subjects = [rng.choice(s.subjects) for s in scales]
    say = [lambda text, t=t: text.format(t=t, T=_cap(t) if t else t) for t in subjects]
    sentences = []
    for s, g, sy in zip(scales, golds, say):
        sentences.append(sy(rng.choice(s.levels[g].facts)))
        if rng.random() < 0.6:                       # a distractor: another level, about something else
            other = rng.choice([lv for i, lv in enumerate(s.levels) if i != g])
            sentences.append(sy(rng.choice(other.others)))
    rng.shuffle(sentences)
    if rng.random() < 0.5:
        sentences.insert(rng.randint(0, len(sentences)), rng.choice(FILLER[WRITER[kind]]))
    body = "\n\n".join(x for x in (rng.choice(OPENERS[kind]), " ".join(sentences), rng.choice(NAMES)) if x)
    q = _Req(rng)
    optional = []                                   # questions dropped first, in this order, down to 4–7
    for j, (s, g, t) in enumerate(zip(scales, golds, subjects)):
        form, reverse = rng.choice(LEVEL_FORMATS), rng.random() < 0.35
        ends = (s.levels[-1], s.levels[0]) if reverse else (s.levels[0], s.levels[-1])
        ask = rng.choice(s.asks).format(lo=f"0 ({ends[0].name})", hi=f"{len(s.levels) - 1} ({ends[1].name})", t=t)
        q.score(ask, [_fmt(lv, form) for lv in s.levels], g, reverse=reverse)
        k, at_least, below = rng.choice(s.cuts)
        q.pair(at_least.format(t=t), below.format(t=t), g >= k)
        if j == 0 or rng.random() < 0.5:
            i = g if rng.random() < 0.4 else rng.randrange(len(s.levels))
            optional.insert(0, q.noul(s.levels[i].ask.format(t=t), i == g))
        if j == 0 and rng.random() < 0.5:
            crit = [_cap(lv.criterion) for lv in s.levels]
            optional.append(q.choice(rng.choice((f"Which best describes the {s.name}?",
                                                 f"Pick the statement that fits the {s.name} in the text.")),
                                     crit, crit[g]))
    n = rng.randint(4, 7)
    for qid in optional:
        if len(q.questions) <= n:
            break
        del q.questions[qid], q.gold[qid]
    return {"state": pad(rng, body, paragraphs=(2, 5)), "questions": q.questions}, q.gold, q.twins


@lru_cache(maxsize=None)
def rows(split: str) -> tuple:
    """Seeded ``rubrics`` rows of ``split`` (:data:`SPLIT_SIZES`); a pure function of the split's seed.

    Raises:
        KeyError: ``split`` is not train, validation or test.
    """
    rng = random.Random(f"rubrics:{SPLIT_SEEDS[split]}")
    return tuple(rubric(rng) for _ in range(SPLIT_SIZES[split]))
