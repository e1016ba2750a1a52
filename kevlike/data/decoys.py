"""``decoys``: texts that name several candidates for one answer and settle on one of them (issue 31).

The realistic split's choice questions are where kevlike-default is weakest (0.40 on the validation half at stage
28, four options): its wrong answers are mostly an option the page *names* — the cause everyone suspected first,
the venue that was fully booked, the date the meeting was moved from — or a near-flat distribution over options
the page all mentions. ``documents`` teaches this on seven kinds of document; this source does it on twelve more
scenarios (a cause found after false leads — a flat sourdough loaf, a car's grinding brakes —, a venue booked after
others were ruled out, a project lead after someone declined, a purchase after near-misses, a hotel's main complaint
beside the ones it did not have, a meeting moved from one date to another, a reviewer's favourite feature beside the
disappointing ones, a holiday destination beside last year's, a shop's settlement beside what it refused, a ticket's
owning team after it was passed on, a doctor's diagnosis after what was ruled out).

Each row: a short text whose sentences, in random order, assert the gold candidate with one of its scenario's
*settling* frames ("It turned out to be {x}.") and mention 0–3 other candidates with *setting-aside* frames
("{X} was considered, but it was too expensive."), among filler sentences, padded into a page with probability
:data:`~kevlike.data.reading.LONG_SHARE`. Questions (5–7, of two types): a choice over the gold, the decoys the
text names and candidates it never names (3–5 options, so the option the text mentions is not the answer by
itself), sometimes a two-option choice between the gold and one decoy; yes/no for the gold (yes), for a named decoy
(no) and for an unnamed candidate (no); and an opposite pair ("Will the offsite be held at X?" / "…somewhere other
than X?") tied as coherence twins. Exactly one candidate holds in every scenario, so "other than X" is the
negation of "X".

Rows are ``(request, gold, twins)`` like :mod:`kevlike.data.reading`'s, with its split seeds and sizes.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from kevlike.data.reading import LONG_SHARE, SPLIT_SEEDS, SPLIT_SIZES, _Req, _s, pad


@dataclass(frozen=True)
class Scenario:
    """One kind of text: its opening lines, the candidates, the frames that settle on a candidate or set one aside
    (``{x}`` the candidate; a frame that starts with it gets it capitalised), and the question wordings: ``choice``
    plain, ``yes`` asking whether ``{x}`` is the answer, ``other`` asking whether the answer is another one."""
    intro: tuple[str, ...]
    pool: tuple[str, ...]
    settle: tuple[str, ...]
    aside: tuple[str, ...]
    choice: tuple[str, ...]
    yes: tuple[str, ...]
    other: tuple[str, ...]


SCENARIOS = (
    Scenario(("My sourdough loaves have been coming out flat for two weeks.", "Posting in case this helps someone."),
             ("a weak starter", "the wrong flour", "too much water", "an oven that runs too cool", "old yeast",
              "over-proofing", "a cold kitchen"),
             ("In the end it turned out to be {x}.", "The real culprit was {x}.", "It was {x} all along."),
             ("Everyone on the forum blamed {x}, but fixing that changed nothing.", "I ruled out {x} early on.",
              "{x} was my first guess, and it was wrong.", "It was not {x}; I checked that twice."),
             ("What turned out to be the cause of the flat loaves?", "Why were the loaves coming out flat?"),
             ("Were the flat loaves caused by {x}?", "Was {x} the reason the loaves were flat?"),
             ("Was something other than {x} behind the flat loaves?",)),
    Scenario(("My car made a grinding noise when braking, so I took it to the garage on Monday.",),
             ("worn brake pads", "a loose heat shield", "a stone stuck in the brake", "a failing wheel bearing",
              "a warped brake disc", "a bent dust cover"),
             ("The mechanic found that it was {x}.", "The noise came from {x}, and that is now fixed.",
              "Diagnosis: {x}."),
             ("I was sure it was {x}, but the mechanic said no.", "They checked for {x} first; that was fine.",
              "{x} was ruled out within ten minutes."),
             ("What was causing the grinding noise?", "What did the mechanic find?"),
             ("Was the noise caused by {x}?", "Did the mechanic find {x}?"),
             ("Was the noise caused by something other than {x}?",)),
    Scenario(("Planning update for the team offsite in September.", "Thanks to everyone who sent suggestions."),
             ("the Riverside Hall", "the Old Mill", "the Harbour Hotel", "the Science Museum", "the Glasshouse",
              "the Lakeside Lodge"),
             ("We have booked {x}.", "The offsite will take place at {x}.", "In the end we signed the contract with {x}."),
             ("{x} was considered, but it was too expensive.", "{x} was fully booked for our dates.",
              "We visited {x} too, but it was too small for forty people.", "{x} did not reply in time."),
             ("Which venue was booked for the offsite?", "Where will the offsite take place?"),
             ("Will the offsite be held at {x}?", "Was {x} booked for the offsite?"),
             ("Will the offsite be held somewhere other than {x}?",)),
    Scenario(("Update on the data migration project.", "The kick-off is planned for the first week of next month."),
             ("Ana", "Ben", "Chloe", "Dev", "Elena", "Farid", "Grace", "Hugo", "Iris", "Jonas"),
             ("{x} will lead the project.", "The project lead is {x}.", "{x} has agreed to lead it."),
             ("{x} was asked first but declined.", "{x} led the last migration but has moved to another team.",
              "{x} will review the plan but will not lead it.", "{x} is on leave until the spring."),
             ("Who will lead the project?", "Who is the project lead?"),
             ("Is {x} going to lead the project?", "Is {x} the project lead?"),
             ("Will someone other than {x} lead the project?",)),
    Scenario(("Review after one month with my new laptop.",),
             ("the Zenbook 14", "the ThinkPad X1", "the MacBook Air", "the Pavilion 15", "the Swift Go",
              "the Surface Laptop"),
             ("I ended up buying {x}.", "I went with {x}.", "My choice was {x}, and I do not regret it."),
             ("I almost bought {x}, but the battery reviews put me off.", "My brother has {x} and loves it.",
              "{x} was out of stock everywhere.", "I tried {x} in a shop but found the keyboard too shallow."),
             ("Which laptop did the reviewer buy?", "What laptop does the review say was bought?"),
             ("Did the reviewer buy {x}?", "Is {x} the laptop the reviewer bought?"),
             ("Did the reviewer buy a laptop other than {x}?",)),
    Scenario(("We stayed four nights in October.", "Overall a mixed experience."),
             ("noise at night", "a dirty room", "rude staff", "a poor location", "a broken shower", "slow wifi"),
             ("What really spoiled the stay was {x}.", "Our main complaint is {x}.", "The biggest problem was {x}."),
             ("Some reviews mention {x}; we had no trouble with that.", "I had read about {x} but saw nothing of the kind.",
              "{x} was not an issue for us."),
             ("What was the main problem with the stay?", "What is the reviewer's main complaint?"),
             ("Was {x} the main problem with the stay?", "Is the main complaint {x}?"),
             ("Was the main problem with the stay something other than {x}?",)),
    Scenario(("Hi all, a quick note about the quarterly review with the client.",),
             ("Monday 3 June", "Tuesday 4 June", "Wednesday 5 June", "Thursday 6 June", "Friday 7 June",
              "Monday 10 June", "Tuesday 11 June"),
             ("The meeting is now on {x}.", "It has been moved to {x}.", "Please put {x} in your calendar."),
             ("The meeting was originally planned for {x}.", "{x} no longer works for the client.",
              "Some of you suggested {x}, but the room is taken that day."),
             ("When will the review meeting take place?", "On which day is the meeting now?"),
             ("Is the meeting on {x}?", "Will the review take place on {x}?"),
             ("Is the meeting on a day other than {x}?",)),
    Scenario(("I have used this phone every day since March.",),
             ("the battery life", "the screen", "the camera", "the speakers", "the build quality", "the fingerprint reader"),
             ("What I love most is {x}.", "The best thing about it is {x}.", "{x} is outstanding, the best I have had."),
             ("{x} is only average.", "The box advertises {x}, but it is nothing special.", "I expected more from {x}."),
             ("Which feature does the reviewer praise most?", "What does the reviewer like best about the phone?"),
             ("Does the reviewer praise {x} most?", "Is {x} what the reviewer likes best?"),
             ("Does the reviewer like something other than {x} best?",)),
    Scenario(("Family holiday plans for this summer.",),
             ("Lisbon", "Vienna", "Krakow", "Dublin", "Seville", "Copenhagen", "Ljubljana"),
             ("We finally booked flights to {x}.", "This year we are going to {x}.", "It is settled: {x} it is."),
             ("We went to {x} last year.", "{x} was our first idea, but the flights were too expensive.",
              "My sister recommended {x}; maybe next time."),
             ("Where is the family going this summer?", "Which city did the family book for this summer?"),
             ("Is the family going to {x} this summer?", "Did the family book {x}?"),
             ("Is the family going somewhere other than {x} this summer?",)),
    Scenario(("Follow-up on my complaint about the coffee machine that stopped working after a week.",),
             ("a full refund", "a replacement machine", "store credit", "a partial refund", "a free repair",
              "a discount on my next order"),
             ("The shop has agreed to give me {x}.", "They finally settled on {x}.", "I am getting {x}."),
             ("I asked for {x}, but they refused.", "{x} was not possible, they said.",
              "Their policy rules out {x} after seven days."),
             ("What did the shop finally agree to?", "How was the complaint settled?"),
             ("Did the shop agree to {x}?", "Is the customer getting {x}?"),
             ("Did the shop agree to something other than {x}?",)),
    Scenario(("Triage notes for ticket 4411: customers cannot download their invoices.",),
             ("the payments team", "the platform team", "the mobile team", "the data team", "the security team",
              "the support tools team"),
             ("The ticket is now assigned to {x}.", "{x} owns it from here.", "{x} has taken the ticket."),
             ("It was first sent to {x}, who passed it on.", "{x} looked at it but said it was not theirs.",
              "{x} was copied for information only."),
             ("Which team owns the ticket now?", "Who is the ticket assigned to now?"),
             ("Does {x} own the ticket now?", "Is the ticket assigned to {x} now?"),
             ("Does a team other than {x} own the ticket now?",)),
    Scenario(("Letter from the clinic after your appointment on 14 May.",),
             ("a pulled muscle", "a stress fracture", "tendonitis", "a torn ligament", "a bruised bone", "shin splints"),
             ("The scan shows {x}.", "The diagnosis is {x}.", "Your pain is caused by {x}."),
             ("We ruled out {x}.", "There is no sign of {x}.", "You were worried about {x}; the scan does not show it."),
             ("What is the diagnosis?", "What does the letter say is causing the pain?"),
             ("Is the diagnosis {x}?", "Does the letter diagnose {x}?"),
             ("Is the diagnosis something other than {x}?",)),
)

FILLER = ("More details will follow next week.", "Thanks for reading.", "Questions are welcome, as always.",
          "I will post an update if anything changes.", "Nothing else is new.", "Let me know if I missed anything.")


def _sentence(frame: str, x: str) -> str:
    return _s(frame.format(x=x))


def decoy_row(rng: random.Random) -> tuple[dict, dict, list]:
    """One ``(request, gold, twins)`` row (module docstring): 4–7 questions on a text that settles on one
    candidate and sets 0–3 others aside (5–7 questions, the choice over the text's candidates always among them)."""
    sc = rng.choice(SCENARIOS)
    k = rng.choices((0, 1, 2, 3), weights=(0.15, 0.35, 0.35, 0.15))[0]
    gold, *rest = rng.sample(sc.pool, len(sc.pool))
    named, unnamed = rest[:k], rest[k:]
    body = [_sentence(rng.choice(sc.settle), gold)] + [_sentence(f, d) for d, f in
                                                     zip(named, rng.sample(sc.aside, k))]
    rng.shuffle(body)
    for f in rng.sample(FILLER, rng.randint(0, 2)):
        body.insert(rng.randint(0, len(body)), f)
    text = " ".join(rng.sample(sc.intro, rng.randint(1, len(sc.intro))) + body)
    q = _Req(rng)
    n_opts = rng.randint(max(3, k + 1), min(5, len(sc.pool)))
    q.choice(rng.choice(sc.choice), [gold, *named, *unnamed[:n_opts - 1 - k]], gold)
    if named and rng.random() < 0.4:
        q.choice(rng.choice(sc.choice), [gold, rng.choice(named)], gold)
    q.noul(rng.choice(sc.yes).format(x=gold), True)
    if named:
        q.noul(rng.choice(sc.yes).format(x=rng.choice(named)), False)
    q.noul(rng.choice(sc.yes).format(x=unnamed[0]), False)
    x = rng.choice([gold, *named]) if named else gold
    q.pair(rng.choice(sc.yes).format(x=x), rng.choice(sc.other).format(x=x), x == gold)
    return {"state": pad(rng, text, LONG_SHARE, paragraphs=(3, 7)), "questions": q.questions}, q.gold, q.twins


@lru_cache(maxsize=None)
def rows(split: str) -> tuple:
    """Seeded rows of a split of ``decoys`` (:data:`~kevlike.data.reading.SPLIT_SIZES`: train 6,000, validation
    80, test 300), a pure function of the split's seed."""
    rng = random.Random(f"decoys:{SPLIT_SEEDS[split]}")
    return tuple(decoy_row(rng) for _ in range(SPLIT_SIZES[split]))
