"""``facts``: a seeded generator of short states that state facts, and yes/no questions whose answer is
in those facts (issue 12: the contrast pairs).

Every labelled source kevlike trains on asks what a text is *about* (topic, intent, sentiment), so a
yes/no question is answered well when its words match the topic, whatever the text says about it.
The contrast pairs of ``kevlike eval --suite generalization`` ask the opposite: two states on the same
topic that say opposite things ("arrived early" / "arrived two weeks late"), the same questions, the
other answer. No such data ship in a registry package (DATA.md: no NLI, no BoolQ), so this module
writes it: :data:`FACTS` holds two-sided facts (a lift that works / is out of order), each with several
sentences that state either side (some through a negation: "the lift is not working") and several
questions that ask either side (some negated: "Is the lift not working?"). A state is 1–3 facts of
different subjects and 0–2 neutral sentences, in random order; its questions ask about the facts it
states, either side, so that the same question is true on one state and false on another and
topicality alone cannot answer it.

The domains were meant not to be those of ``kevlike/eval/data/contrast.json`` and no sentence or question
is copied from it (tested), but a review after stage 9 found that 16 of its 32 pairs share a domain or a
predicate with a fact here (a trail / a road "blocked", a permit / a warranty "valid", a raffle / a match
"won", …): the contrast figures of a model trained on this source overstate transfer to new domains, and
the model card reports them split. The ``contrast_apart`` pairs (:file:`kevlike/eval/data/contrast_apart.json`)
were written afterwards with no content word of a question in common with this module (tested).

The first 36 facts are a thing's state (working / broken, open / closed, …). Of the 18 added for stage 11,
7 ask other things a text says — who wrote it, where it is, which route, morning or evening, bigger or
smaller, a colour, a majority — and 11 are more states of things (paint dry / wet, asleep / awake, a
light on / off, within / over a weight limit, …); all 18 are ``paired``: a state may tell the same fact
about two subjects on opposite sides ("Ana wrote the report. Ben wrote the press release."), so the
question's subject decides the answer.

Rows are ``(request, gold)`` like sys1bench's typed sources (:func:`rows`); seeds per split: train 1,
validation 2, test 3.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from functools import lru_cache

from kevlike.data.sources import FLIP


@dataclass(frozen=True)
class Fact:
    """A two-sided fact about a subject ``{s}``: sentences stating side A (``a_text``) or side B
    (``b_text``), questions true under side A (``a_q``) or under side B (``b_q``), and a short label of
    each side for the two-option choice (``labels``)."""

    topic: str
    subjects: tuple[str, ...]
    a_text: tuple[str, ...]
    b_text: tuple[str, ...]
    a_q: tuple[str, ...]
    b_q: tuple[str, ...]
    labels: tuple[str, str]
    paired: bool = False


def _f(topic, subjects, a_text, b_text, a_q, b_q, labels, paired=False) -> Fact:
    return Fact(topic, tuple(subjects), tuple(a_text), tuple(b_text), tuple(a_q), tuple(b_q), tuple(labels), paired)


FACTS: tuple[Fact, ...] = (
    _f("library", ["the library book", "my copy of the novel", "the borrowed atlas"],
       ["{s} went back to the library on Monday.", "I returned {s} yesterday.", "{s} is back on the shelf now."],
       ["{s} is still at my place and three weeks overdue.", "I have not returned {s} yet.",
        "{s} never made it back to the library."],
       ["Has {s} been returned?", "Is {s} back at the library?", "Is {s} back on the shelf?"],
       ["Is {s} still checked out?", "Has {s} not been returned?", "Is {s} still out on loan?"],
       ["returned", "not returned"]),
    _f("lift", ["the lift", "the elevator in block C", "the goods lift"],
       ["{s} is running normally again.", "{s} was repaired this morning and works fine.",
        "{s} is back in service."],
       ["{s} is out of order.", "{s} is not working, so please use the stairs.", "{s} broke down again today."],
       ["Is {s} working?", "Can people use {s}?", "Is {s} in service?"],
       ["Is {s} broken?", "Is {s} not working?", "Do people have to take the stairs instead of {s}?"],
       ["working", "out of order"]),
    _f("pool", ["the swimming pool", "the leisure centre pool", "the outdoor lido"],
       ["{s} is open as usual this weekend.", "{s} reopened after the cleaning.", "{s} has normal opening hours."],
       ["{s} is closed for maintenance until further notice.", "{s} will not open this weekend.",
        "{s} has been shut because of a leak."],
       ["Is {s} open?", "Can visitors swim at {s} this weekend?", "Is {s} operating normally?"],
       ["Is {s} closed?", "Is {s} not open?", "Is {s} shut?"],
       ["open", "closed"]),
    _f("printer", ["the office printer", "the colour printer", "the printer on floor two"],
       ["{s} prints fine now that the paper jam is cleared.", "{s} is working and has plenty of toner.",
        "I fixed {s}; it prints again."],
       ["{s} keeps jamming and prints nothing.", "{s} is not printing at all.", "{s} has run out of toner."],
       ["Is {s} printing?", "Does {s} work?", "Can staff print on {s}?"],
       ["Is {s} failing to print?", "Does {s} not work?", "Is something wrong with {s}?"],
       ["printing", "not printing"]),
    _f("shift", ["Saturday's volunteer shift", "the food bank shift", "the evening shift at the shelter"],
       ["{s} is fully covered.", "We found enough volunteers for {s}.", "Every slot in {s} is filled."],
       ["{s} is still short of three people.", "Nobody has signed up for {s} yet.",
        "{s} does not have enough volunteers."],
       ["Is {s} fully staffed?", "Are there enough volunteers for {s}?", "Is {s} covered?"],
       ["Is {s} short-staffed?", "Does {s} still need volunteers?", "Is {s} not fully covered?"],
       ["fully staffed", "short-staffed"]),
    _f("bread", ["the bread", "the sourdough loaf", "the bagel from the bakery"],
       ["{s} was baked this morning and is still soft.", "{s} is fresh.", "{s} came straight out of the oven."],
       ["{s} is stale and hard.", "{s} is two days old and dry.", "{s} is not fresh any more."],
       ["Is {s} fresh?", "Is {s} fine to eat?", "Is {s} still soft?"],
       ["Is {s} stale?", "Has {s} gone off?", "Is {s} not fresh?"],
       ["fresh", "stale"]),
    _f("screen", ["my phone screen", "the tablet display", "the laptop screen"],
       ["{s} survived the fall without a scratch.", "{s} is intact.", "Not a single crack on {s}."],
       ["{s} is cracked from corner to corner.", "{s} shattered when it fell.", "{s} is broken."],
       ["Is {s} undamaged?", "Did {s} survive the fall?", "Is {s} in one piece?"],
       ["Is {s} cracked?", "Was {s} damaged?", "Does {s} need replacing?"],
       ["intact", "cracked"]),
    _f("fridge", ["the fridge", "the freezer in the staff kitchen", "the kitchen fridge"],
       ["{s} is cold again after the repair.", "{s} keeps everything properly chilled.", "{s} is working fine."],
       ["{s} stopped cooling and everything inside is warm.", "{s} is not cold at all.", "{s} has broken down."],
       ["Is {s} cooling?", "Is the food in {s} kept cold?", "Is {s} working?"],
       ["Has {s} stopped cooling?", "Is {s} warm inside?", "Is {s} not working?"],
       ["cooling", "not cooling"]),
    _f("wifi", ["the office wifi", "the café wifi", "the campus network"],
       ["{s} is fast and stable today.", "{s} has had no drop-outs all week.", "{s} works perfectly."],
       ["{s} keeps dropping out.", "{s} is painfully slow.", "{s} has been down since lunch."],
       ["Is {s} working well?", "Is {s} reliable?", "Can people get online on {s} without trouble?"],
       ["Is {s} having problems?", "Is {s} unreliable?", "Is {s} not working properly?"],
       ["working well", "having problems"]),
    _f("price", ["the monthly gym fee", "the bus pass", "the season ticket"],
       ["{s} goes down by ten percent next month.", "{s} is being reduced.", "{s} will be cheaper from May."],
       ["{s} goes up by ten percent next month.", "{s} is being raised.", "{s} will cost more from May."],
       ["Is {s} getting cheaper?", "Will {s} decrease?", "Is {s} being lowered?"],
       ["Is {s} going up?", "Will {s} be more expensive?", "Is {s} not getting cheaper?"],
       ["decreasing", "increasing"]),
    _f("revenue", ["our revenue", "the shop's turnover", "quarterly turnover"],
       ["{s} grew strongly this quarter.", "{s} rose by twelve percent.", "{s} hit a record high."],
       ["{s} fell sharply this quarter.", "{s} dropped by twelve percent.", "{s} was the lowest in years."],
       ["Did {s} increase?", "Is {s} up?", "Did {s} grow?"],
       ["Did {s} decline?", "Is {s} down?", "Did {s} not grow?"],
       ["up", "down"]),
    _f("homework", ["Maya's homework", "the maths assignment", "my son's science project"],
       ["{s} is finished and handed in.", "{s} was completed last night.", "{s} is done."],
       ["{s} is only half done.", "{s} has not been started.", "{s} is still unfinished."],
       ["Is {s} finished?", "Has {s} been completed?", "Is {s} ready to hand in?"],
       ["Is {s} incomplete?", "Is {s} still unfinished?", "Has {s} not been completed?"],
       ["finished", "unfinished"]),
    _f("trail", ["the ridge trail", "the coastal path", "the forest loop"],
       ["{s} is open and the snow has cleared.", "{s} reopened to hikers this week.", "{s} is safe to walk."],
       ["{s} is closed after a landslide.", "{s} is blocked by fallen trees.", "{s} is not open to hikers."],
       ["Is {s} open?", "Can hikers use {s}?", "Is {s} passable?"],
       ["Is {s} closed?", "Is {s} blocked?", "Is {s} not open to hikers?"],
       ["open", "closed"]),
    _f("dentist", ["the dentist appointment", "my check-up with the hygienist", "Leo's orthodontist visit"],
       ["I went to {s} as planned.", "{s} happened this morning.", "We made it to {s} on time."],
       ["I missed {s}.", "{s} did not happen because I forgot.", "We never made it to {s}."],
       ["Did {s} take place?", "Was {s} attended?", "Did the patient go to {s}?"],
       ["Was {s} missed?", "Did the patient skip {s}?", "Did {s} not happen?"],
       ["attended", "missed"]),
    _f("translation", ["the translation", "the French draft", "the subtitle file"],
       ["{s} is accurate and reads naturally.", "{s} needed no corrections.", "{s} is excellent."],
       ["{s} is full of mistakes.", "{s} gets half the sentences wrong.", "{s} is not usable as it is."],
       ["Is {s} good?", "Is {s} accurate?", "Can {s} be used as it is?"],
       ["Does {s} have errors?", "Does {s} need fixing?", "Is {s} poor?"],
       ["accurate", "full of errors"]),
    _f("tyres", ["the bike tyres", "the front tyres", "the tyres on my scooter"],
       ["{s} are pumped up and ready.", "{s} hold air fine.", "I inflated {s} this morning."],
       ["{s} are flat.", "{s} lost all their air overnight.", "{s} have a puncture."],
       ["Are {s} inflated?", "Are {s} fine to ride on?", "Do {s} hold air?"],
       ["Are {s} flat?", "Do {s} need fixing?", "Are {s} not holding air?"],
       ["inflated", "flat"]),
    _f("cat", ["our cat Biscuit", "the neighbour's cat", "the grey kitten"],
       ["{s} came home last night, safe and hungry.", "{s} has been found.", "{s} is back with us."],
       ["{s} is still missing.", "{s} has not come home for four days.", "Nobody has seen {s} since Friday."],
       ["Has {s} been found?", "Is {s} home?", "Is {s} safe at home?"],
       ["Is {s} still lost?", "Is {s} missing?", "Has {s} not come back?"],
       ["found", "missing"]),
    _f("tank", ["the rental car", "the company van", "the hire car"],
       ["{s} was returned with a full tank.", "I filled up {s} before handing it back.",
        "{s} came back fully fuelled."],
       ["{s} was returned nearly empty.", "{s} came back without being refuelled.",
        "{s} was handed back on an empty tank."],
       ["Was {s} refuelled?", "Did {s} come back with a full tank?", "Was {s} filled up before return?"],
       ["Was {s} returned empty?", "Was {s} handed back without fuel?", "Was {s} not refuelled?"],
       ["full tank", "empty tank"]),
    _f("talk", ["my conference talk", "the workshop proposal", "our poster submission"],
       ["{s} was accepted.", "The committee said yes to {s}.", "{s} made it into the programme."],
       ["{s} was turned down.", "{s} did not get in.", "The committee rejected {s}."],
       ["Was {s} accepted?", "Is {s} in the programme?", "Did {s} get in?"],
       ["Was {s} rejected?", "Was {s} turned down?", "Did {s} not make the programme?"],
       ["accepted", "rejected"]),
    _f("harvest", ["this year's apple harvest", "the wheat crop", "the grape harvest"],
       ["{s} was the best in a decade.", "{s} was plentiful.", "{s} came in well above average."],
       ["{s} failed after the drought.", "{s} was very poor.", "{s} came in far below average."],
       ["Was {s} good?", "Was {s} plentiful?", "Did {s} go well?"],
       ["Was {s} bad?", "Did {s} fail?", "Was {s} below average?"],
       ["good", "poor"]),
    _f("door", ["the back door", "the shed", "the garage"],
       ["I double-checked and {s} is locked.", "{s} was locked when we left.", "{s} is securely locked."],
       ["{s} was left unlocked all night.", "Nobody locked {s}.", "{s} is not locked."],
       ["Is {s} locked?", "Was {s} secured?", "Is {s} locked up?"],
       ["Was {s} left unlocked?", "Is {s} unlocked?", "Is {s} not locked?"],
       ["locked", "unlocked"]),
    _f("licence", ["the software licence", "my photo editor licence", "the team's design tool"],
       ["{s} is activated and working.", "{s} was activated without problems.", "{s} is now active."],
       ["{s} will not activate.", "{s} shows an activation error.", "{s} is still inactive."],
       ["Is {s} active?", "Did the activation of {s} succeed?", "Is {s} working?"],
       ["Is {s} inactive?", "Did the activation of {s} fail?", "Is {s} not activated?"],
       ["activated", "not activated"]),
    _f("river", ["the river", "the Thames", "the stream"],
       ["{s} is falling after the dry week.", "{s} has dropped back to normal.", "{s} is going down."],
       ["{s} is rising fast after the storm.", "{s} is close to bursting its banks.", "{s} keeps going up."],
       ["Is {s} going down?", "Is {s} falling?", "Is the flood risk from {s} easing?"],
       ["Is {s} rising?", "Is there a flood risk from {s}?", "Is {s} not going down?"],
       ["falling", "rising"]),
    _f("foodtruck", ["the taco truck", "the coffee van", "the noodle stall"],
       ["{s} turned up at the market as promised.", "{s} was there and serving.", "{s} opened on time."],
       ["{s} never showed up at the market.", "{s} did not come today.", "{s} cancelled at the last minute."],
       ["Did {s} show up?", "Was {s} serving at the market?", "Was {s} there?"],
       ["Was {s} absent?", "Did {s} fail to turn up?", "Did {s} not come?"],
       ["showed up", "no-show"]),
    _f("battery", ["my laptop battery", "my e-reader battery", "the phone's battery"],
       ["{s} still lasts a full day.", "{s} holds its charge well.", "{s} is as good as new."],
       ["{s} dies after an hour.", "{s} drains very fast.", "{s} no longer holds a charge."],
       ["Does {s} hold its charge?", "Is {s} in good shape?", "Does {s} last long?"],
       ["Is {s} failing?", "Does {s} drain quickly?", "Does {s} not last long?"],
       ["good", "failing"]),
    _f("plants", ["the tomato plants", "the basil plants on the balcony", "the office ferns"],
       ["{s} are thriving.", "{s} look green and healthy.", "{s} grew a lot this month."],
       ["{s} are wilting.", "{s} have turned brown and dry.", "{s} are dying."],
       ["Are {s} healthy?", "Are {s} doing well?", "Are {s} thriving?"],
       ["Are {s} dying?", "Are {s} in poor health?", "Are {s} not doing well?"],
       ["healthy", "wilting"]),
    _f("boxes", ["the moving boxes", "the kitchen things", "the books"],
       ["{s} are all packed and taped.", "We finished packing {s}.", "{s} are ready for the van."],
       ["{s} are not packed yet.", "We haven't even started on {s}.", "{s} are still all over the floor."],
       ["Are {s} packed?", "Are {s} ready to move?", "Is the packing of {s} finished?"],
       ["Are {s} still unpacked?", "Do {s} still need packing?", "Are {s} not ready?"],
       ["packed", "not packed"]),
    _f("survey", ["the staff survey", "the customer questionnaire", "the parents' poll"],
       ["{s} got replies from almost everyone.", "{s} had a very high response rate.",
        "Nearly all of those asked answered {s}."],
       ["Hardly anyone answered {s}.", "{s} had a very low response rate.", "{s} got only a handful of replies."],
       ["Did many people respond to {s}?", "Was the response rate of {s} high?", "Was {s} well answered?"],
       ["Was the response to {s} poor?", "Did few people answer {s}?", "Was the response rate of {s} low?"],
       ["high response", "low response"]),
    _f("exhibition", ["the dinosaur exhibition", "the photography show", "the Monet exhibition"],
       ["{s} has been extended until June.", "{s} will stay open longer than planned.", "{s} runs for two extra months."],
       ["{s} closed early.", "{s} ended a month ahead of schedule.", "{s} is no longer on."],
       ["Is {s} still running?", "Can visitors still see {s}?", "Was {s} extended?"],
       ["Has {s} ended?", "Did {s} close early?", "Is {s} no longer open?"],
       ["extended", "closed early"]),
    _f("parking", ["my parking permit", "the resident permit", "the staff car park pass"],
       ["{s} was renewed last week.", "{s} is valid until next year.", "{s} is up to date."],
       ["{s} lapsed at the end of March.", "{s} is no longer valid.", "I forgot to renew {s}."],
       ["Is {s} valid?", "Was {s} renewed?", "Is {s} current?"],
       ["Has {s} lapsed?", "Is {s} invalid?", "Was {s} not renewed?"],
       ["valid", "lapsed"]),
    _f("guests", ["the quiz night", "the charity dinner", "the book club"],
       ["{s} was packed; every table was full.", "{s} drew a big crowd.", "{s} was very well attended."],
       ["{s} was almost empty.", "Only three people came to {s}.", "{s} drew hardly anyone."],
       ["Was {s} well attended?", "Did many people come to {s}?", "Was {s} busy?"],
       ["Was {s} poorly attended?", "Did few people come to {s}?", "Was {s} quiet?"],
       ["busy", "empty"]),
    _f("heating", ["the classroom", "the changing room", "the studio"],
       ["{s} was warm and cosy.", "The heating in {s} works well.", "{s} was nicely heated."],
       ["{s} was freezing.", "{s} had no heating all day.", "{s} was far too cold to work in."],
       ["Was {s} warm?", "Is the heating in {s} working?", "Was {s} comfortable?"],
       ["Was {s} cold?", "Was {s} unheated?", "Was {s} not warm enough?"],
       ["warm", "cold"]),
    _f("lottery", ["my raffle ticket", "our ticket in the school tombola", "the office lottery syndicate"],
       ["{s} won the first prize!", "{s} was a winner.", "{s} came up, we won the hamper."],
       ["{s} did not win anything.", "{s} lost again.", "{s} came away empty-handed."],
       ["Did {s} win?", "Was {s} a winner?", "Did {s} get a prize?"],
       ["Did {s} lose?", "Did {s} win nothing?", "Did {s} not win?"],
       ["won", "lost"]),
    _f("vaccine", ["the puppy", "the foal", "our rabbit"],
       ["{s} has had all its vaccinations.", "{s} is fully vaccinated.", "{s} got its last jab on Tuesday."],
       ["{s} has not been vaccinated yet.", "{s} is still missing its jabs.", "{s} skipped its vaccination."],
       ["Is {s} vaccinated?", "Has {s} had its jabs?", "Is {s} protected by vaccination?"],
       ["Is {s} unvaccinated?", "Does {s} still need its jabs?", "Has {s} not been vaccinated?"],
       ["vaccinated", "not vaccinated"]),
    _f("solar", ["the solar panels", "the new radiators", "the heat pumps"],
       ["{s} were installed on Friday.", "The installation of {s} is complete.", "{s} are up and running."],
       ["The installation of {s} was postponed.", "{s} have not been fitted yet.", "{s} are still in their boxes."],
       ["Have {s} been installed?", "Are {s} running?", "Is the installation of {s} done?"],
       ["Is the installation of {s} delayed?", "Are {s} not installed yet?", "Are {s} still waiting to be fitted?"],
       ["installed", "not installed"]),
    _f("noise_complaint", ["the upstairs neighbours", "the people next door", "the students across the hall"],
       ["{s} were perfectly quiet last night.", "We didn't hear a sound from {s}.", "{s} have been very considerate."],
       ["{s} played loud music until 3am.", "{s} kept us awake all night.", "{s} had another noisy party."],
       ["Were {s} quiet?", "Were {s} considerate?", "Did {s} let people sleep?"],
       ["Were {s} noisy?", "Did {s} keep people awake?", "Were {s} not quiet?"],
       ["quiet", "noisy"]),
    # Added for stage 11: 7 facts that ask who, where, which route, when, bigger or smaller, a colour, a
    # majority, then 11 more states of things; all with subjects that can share one state (``paired``: the
    # same fact about two subjects, opposite sides, so the question's subject decides the answer).
    _f("author", ["the annual report", "the grant proposal", "the press release"],
       ["Ana wrote {s}.", "{s} was written by Ana.", "Ana drafted {s} herself; Ben only read it."],
       ["Ben wrote {s}.", "{s} was written by Ben.", "Ben drafted {s} himself; Ana only read it."],
       ["Did Ana write {s}?", "Is Ana the author of {s}?", "Was {s} drafted by Ana?"],
       ["Did Ben write {s}?", "Is Ben the author of {s}?", "Was {s} not written by Ana?"],
       ["Ana", "Ben"], paired=True),
    _f("whereabouts", ["the spare key", "my wallet", "the remote control"],
       ["{s} is at home in the kitchen drawer.", "I found {s} on the hall table at home.",
        "{s} never left the house."],
       ["I left {s} at the office.", "{s} is still in my desk at work.", "{s} is at work, not at home."],
       ["Is {s} at home?", "Is {s} in the house?", "Is {s} somewhere at home?"],
       ["Is {s} at the office?", "Was {s} left at work?", "Is {s} not at home?"],
       ["at home", "at the office"], paired=True),
    _f("timeofday", ["the piano lesson", "the yoga class", "the choir rehearsal"],
       ["{s} is at nine in the morning.", "{s} starts at ten in the morning.", "{s} was moved to the morning."],
       ["{s} is at seven in the evening.", "{s} starts at eight in the evening.", "{s} was moved to the evening."],
       ["Is {s} in the morning?", "Does {s} start before noon?", "Is {s} early in the day?"],
       ["Is {s} in the evening?", "Does {s} start after noon?", "Is {s} late in the day?"],
       ["morning", "evening"], paired=True),
    _f("size", ["the blue tent", "the new sofa", "the oak table"],
       ["{s} is bigger than the old one.", "{s} is larger than the one we had before.",
        "{s} takes up more room than the old one."],
       ["{s} is smaller than the old one.", "{s} is more compact than the one we had before.",
        "{s} takes up less room than the old one."],
       ["Is {s} bigger than the old one?", "Is {s} larger than the one before?", "Does {s} take up more room than the old one?"],
       ["Is {s} smaller than the old one?", "Is {s} more compact than the one before?",
        "Does {s} take up less room than the old one?"],
       ["bigger", "smaller"], paired=True),
    _f("weight", ["the suitcase", "the rucksack", "the parcel for Gran"],
       ["{s} weighs 18 kg, under the 23 kg limit.", "{s} is well within the weight limit.",
        "{s} weighs less than the limit allows."],
       ["{s} weighs 27 kg, over the 23 kg limit.", "{s} is too heavy for the limit.", "{s} exceeds the weight limit."],
       ["Is {s} within the weight limit?", "Is {s} light enough?", "Is {s} under the limit?"],
       ["Is {s} overweight?", "Is {s} too heavy?", "Is {s} over the limit?"],
       ["within the limit", "over the limit"], paired=True),
    _f("paint", ["the paint on the fence", "the varnish on the shelf", "the glue on the model plane"],
       ["{s} is completely dry now.", "{s} dried overnight.", "{s} has set hard."],
       ["{s} is still wet.", "{s} has not dried yet.", "{s} has not set yet."],
       ["Is {s} dry?", "Has {s} set?", "Can {s} be touched now?"],
       ["Is {s} still wet?", "Is {s} not dry yet?", "Has {s} not set yet?"],
       ["dry", "wet"], paired=True),
    _f("sleep", ["the baby", "the toddler", "Grandad"],
       ["{s} is fast asleep.", "{s} fell asleep an hour ago.", "{s} is having a nap."],
       ["{s} is wide awake.", "{s} woke up from the nap.", "{s} will not go to sleep."],
       ["Is {s} asleep?", "Is {s} sleeping?", "Is {s} not awake?"],
       ["Is {s} awake?", "Is {s} up?", "Is {s} not asleep?"],
       ["asleep", "awake"], paired=True),
    _f("switch", ["the porch light", "the oven", "the iron"],
       ["{s} was switched off before we left.", "I turned off {s}.", "{s} was turned off."],
       ["{s} has been on all night and still is.", "Nobody turned off {s}; it is still on.", "{s} is still on."],
       ["Is {s} off?", "Was {s} turned off?", "Did someone switch off {s}?"],
       ["Is {s} still on?", "Was {s} left on?", "Is {s} not switched off?"],
       ["off", "on"], paired=True),
    _f("ice", ["the ice on the lake", "the ice on the pond", "the frozen canal"],
       ["{s} is thick enough to skate on.", "{s} is solid; ten skaters were on it today.",
        "{s} is thick and will easily hold a person."],
       ["{s} is too thin to walk on.", "{s} cracked under a small dog.", "{s} is thawing and will not hold anyone."],
       ["Is {s} thick enough to skate on?", "Will {s} hold a person?", "Is {s} solid?"],
       ["Is {s} too thin?", "Would {s} crack under a person?", "Is {s} unsafe to stand on?"],
       ["thick", "thin"], paired=True),
    _f("seat", ["the table by the window", "the corner table", "the table for two"],
       ["{s} is free.", "Nobody is sitting at {s}.", "{s} is empty, you can take it."],
       ["{s} is taken; someone is sitting there.", "Every chair at {s} is taken.", "{s} is occupied."],
       ["Is {s} free?", "Can someone sit at {s}?", "Is {s} empty?"],
       ["Is {s} taken?", "Is someone sitting at {s}?", "Is {s} occupied?"],
       ["free", "taken"], paired=True),
    _f("eggs", ["the duck eggs", "the hen's eggs", "the robin's eggs"],
       ["{s} hatched this morning.", "{s} have all hatched.", "The hatchlings from {s} are out."],
       ["{s} have not hatched yet.", "{s} are still unhatched.", "We are still waiting for {s} to hatch."],
       ["Have {s} hatched?", "Are the hatchlings out of {s}?", "Did {s} hatch?"],
       ["Are {s} still unhatched?", "Have {s} not hatched yet?", "Are {s} yet to hatch?"],
       ["hatched", "not hatched"], paired=True),
    _f("laundry", ["the towels", "the bed sheets", "the school shirts"],
       ["{s} are dry and folded.", "{s} dried in the sun.", "{s} are bone dry."],
       ["{s} are still damp.", "{s} got soaked in the rain and are still wet.", "{s} are wet."],
       ["Are {s} dry?", "Did {s} dry?", "Are {s} not damp?"],
       ["Are {s} still damp?", "Are {s} wet?", "Are {s} not dry?"],
       ["dry", "damp"], paired=True),
    _f("meal", ["the children", "the guests", "the builders"],
       ["{s} have already eaten.", "{s} had lunch at noon.", "{s} finished their dinner."],
       ["{s} have had nothing to eat all day.", "{s} have not eaten yet.", "{s} are still waiting to eat."],
       ["Have {s} eaten?", "Did {s} have a meal?", "Have {s} had food?"],
       ["Are {s} yet to eat?", "Have {s} not eaten yet?", "Are {s} still waiting to eat?"],
       ["eaten", "not eaten"], paired=True),
    _f("clock", ["the clock in the hall", "my watch", "the kitchen clock"],
       ["{s} runs ten minutes fast.", "{s} is ahead of the real time.", "{s} shows a later time than it is."],
       ["{s} runs ten minutes slow.", "{s} is behind the real time.", "{s} shows an earlier time than it is."],
       ["Is {s} fast?", "Is {s} ahead?", "Does {s} show a later time than it is?"],
       ["Is {s} slow?", "Is {s} behind?", "Does {s} show an earlier time than it is?"],
       ["fast", "slow"], paired=True),
    _f("sibling", ["Sara", "Lena", "Chloe"],
       ["{s} is two years older than her brother.", "{s} was born before her brother.", "Of {s} and her brother, she is the elder."],
       ["{s} is two years younger than her brother.", "{s} was born after her brother.", "Of {s} and her brother, she is the younger."],
       ["Is {s} older than her brother?", "Was {s} born first?", "Is {s} the elder sibling?"],
       ["Is {s} younger than her brother?", "Was {s} born after her brother?", "Is {s} not the elder sibling?"],
       ["older", "younger"], paired=True),
    _f("colour", ["the front door", "the garden bench", "the old bicycle"],
       ["{s} is painted bright red.", "{s} has a fresh coat of red paint.", "We painted {s} red last summer."],
       ["{s} is painted dark green.", "{s} has a fresh coat of green paint.", "We painted {s} green last summer."],
       ["Is {s} red?", "Was {s} painted red?", "Is the colour of {s} red?"],
       ["Is {s} green?", "Was {s} painted green?", "Is {s} not red?"],
       ["red", "green"], paired=True),
    _f("majority", ["the pupils", "the new starters", "the singers"],
       ["Most of {s} chose Spanish.", "Spanish was the choice of most of {s}.", "Only a few of {s} picked French; the rest chose Spanish."],
       ["Most of {s} chose French.", "French was the choice of most of {s}.", "Only a few of {s} picked Spanish; the rest chose French."],
       ["Did most of {s} choose Spanish?", "Was Spanish the more popular choice among {s}?", "Did more of {s} pick Spanish than French?"],
       ["Did most of {s} choose French?", "Was French the more popular choice among {s}?", "Did more of {s} pick French than Spanish?"],
       ["Spanish", "French"], paired=True),
    _f("route", ["our hike", "the school trip", "the cycling tour"],
       ["{s} goes along the coast.", "{s} follows the sea shore all day.", "{s} stays by the sea."],
       ["{s} goes through the mountains.", "{s} climbs over the high passes.", "{s} crosses the mountains far from the coast."],
       ["Does {s} follow the coast?", "Does {s} stay by the sea?", "Is {s} a coastal route?"],
       ["Does {s} go through the mountains?", "Does {s} head inland?", "Is {s} a mountain route?"],
       ["coast", "mountains"], paired=True),
)

FILLER = (
    "Quick update from me.", "Just letting you know.", "Thanks for asking.", "Here is where things stand.",
    "Writing this on my phone, sorry for typos.", "More news tomorrow.", "Hope your week is going well.",
    "As promised, an update.", "Cheers.", "Let me know if you have questions.",
)
CHOICE_TEMPLATES = ("What is the state of {s}?", "Which describes {s}?", "How are things with {s}?",
                    "Which option fits {s}, according to the text?")
NEUTRAL_CHOICE_TEMPLATES = ("Which option fits {s}, according to the text?", "According to the text, which is true of {s}?")
PAIRED_SHARE = 0.4
SPLIT_SEEDS = {"train": 1, "validation": 2, "test": 3}
SPLIT_SIZES = {"train": 4000, "validation": 60, "test": 200}


def _sentence(text: str) -> str:
    return text[0].upper() + text[1:]


def request(rng: random.Random) -> tuple[dict, dict]:
    """One ``(request, gold)`` row: a state of 1–3 facts (different topics; a ``paired`` fact, with
    probability ``PAIRED_SHARE``, told about a second subject on the opposite side) and 0–2 filler sentences;
    1–6 questions about those facts (2–6 drawn, a repeat dropped): about a fifth two-option choices
    ``{side A, side B}``, the rest yes/no on either side. ``gold`` maps question ids to ``"true"``/``"false"``
    or the choice's key."""
    facts = rng.sample(FACTS, rng.randint(1, 3))
    told = []
    for f in facts:
        s = rng.choice(f.subjects)
        side_a = rng.random() < 0.5
        told.append((f, s, side_a))
        if f.paired and rng.random() < PAIRED_SHARE:
            told.append((f, rng.choice([x for x in f.subjects if x != s]), not side_a))
    parts = [_sentence(rng.choice(f.a_text if a else f.b_text).format(s=s)) for f, s, a in told]
    parts += rng.sample(FILLER, rng.randint(0, 2))
    rng.shuffle(parts)
    questions, gold, chosen = {}, {}, set()
    nq = rng.randint(2, 6)
    for i in range(nq):
        f, s, side_a = rng.choice(told)
        qid = f"q{i}"
        if rng.random() < 0.2:
            if (f.topic, s) in chosen:
                continue
            chosen.add((f.topic, s))
            instructions = rng.choice(NEUTRAL_CHOICE_TEMPLATES if f.paired else CHOICE_TEMPLATES).format(s=s)
            keys = list(f.labels)
            rng.shuffle(keys)
            questions[qid] = {"type": "choice", "instructions": instructions,
                              "criteria": {k: None for k in keys}}
            gold[qid] = f.labels[0] if side_a else f.labels[1]
        else:
            ask_a = rng.random() < 0.5
            q = _sentence(rng.choice(f.a_q if ask_a else f.b_q).format(s=s))
            if any(x["instructions"] == q for x in questions.values()):
                continue
            questions[qid] = {"type": "noul", "instructions": q, "criteria": None}
            gold[qid] = "true" if ask_a == side_a else "false"
    return {"state": " ".join(parts), "questions": questions}, gold


@lru_cache(maxsize=None)
def rows(split: str) -> tuple:
    """The seeded rows of a split (train 4,000, validation 60, test 200), ``(request, gold)`` each."""
    rng = random.Random(f"facts:{SPLIT_SEEDS[split]}")
    return tuple(request(rng) for _ in range(SPLIT_SIZES[split]))


@lru_cache(maxsize=1)
def _asked() -> dict:
    """Every yes/no question the generator can ask -> ``(fact, subject, asks side A)``."""
    out = {}
    for f in FACTS:
        for s in f.subjects:
            for side, pool in ((True, f.a_q), (False, f.b_q)):
                for t in pool:
                    out[_sentence(t.format(s=s))] = (f, s, side)
    return out


YES_NO_KEYS = (("yes", "no"), ("yes", "no"), ("Yes", "No"), ("true", "false"))


def with_twins(req: dict, gold: dict, rng: random.Random, p: float, max_questions: int = 8) -> tuple:
    """``(request, gold, twins)``: ``req`` with, for each yes/no question, probability ``p`` of a *coherence
    twin* in the same request — a question on the other side of the same fact (answer swapped, key map
    ``true → false``) or the same words as a two-option choice ``{yes, no}`` (``true → yes``) — tied to
    it by the twin term of the loss (``loss.perm``), so that P(yes | Q) + P(yes | Q's opposite) = 1 and
    the noul and choice forms agree. ``twins`` entries are ``(qa, qb, {key of qa: key of qb})``
    (:class:`kevlike.data.sources.Example`). At most ``max_questions`` questions in all."""
    questions, gold, twins = dict(req["questions"]), dict(gold), []
    asked = {q["instructions"] for q in questions.values()}
    for qid, q in list(req["questions"].items()):
        if len(questions) >= max_questions:
            break
        if q["type"] != "noul" or q["instructions"] not in _asked() or rng.random() >= p:
            continue
        f, s, side = _asked()[q["instructions"]]
        tid = f"{qid}_twin"
        if rng.random() < 0.5:
            options = [x for x in (_sentence(t.format(s=s)) for t in (f.b_q if side else f.a_q)) if x not in asked]
            if not options:
                continue
            questions[tid] = {"type": "noul", "instructions": rng.choice(options), "criteria": None}
            gold[tid] = FLIP[gold[qid]]
            twins.append((qid, tid, FLIP))
            asked.add(questions[tid]["instructions"])
        else:
            yes, no = rng.choice(YES_NO_KEYS)
            questions[tid] = {"type": "choice", "instructions": q["instructions"], "criteria": {yes: None, no: None}}
            gold[tid] = yes if gold[qid] == "true" else no
            twins.append((qid, tid, {"true": yes, "false": no}))
    return {"state": req["state"], "questions": questions}, gold, twins
