"""Compositional message grammars, one small set of sentence templates per category.

A template mixes `{slot}` (a word list from vocabulary.py) and `[a|b|c]` (an inline choice).
Many templates per category, each with several slots and choices, keep the combinations
far above what a data run draws, so messages read like people wrote them rather than like
one form filled in 25,000 times.
"""

from __future__ import annotations

import random
import re

from emojikit_text.vocabulary import SLOTS

TEMPLATES: dict[str, list[str]] = {
    "emotional": [
        "I just {good_event} and I can't stop {happy_action}!",
        "[Guess what|Okay so|Big news]: I {good_event} {past_time}! {reaction}",
        "I'm {degree} {happy_feeling} — I finally {good_event}.",
        "I'm {degree} {sad_feeling}. I {bad_event} {past_time}.",
        "Can't believe I {bad_event} {past_time}. {reaction}",
        "{person} {person_good_event} and I'm {degree} proud of them.",
        "Feeling {degree} {sad_feeling} because {bad_news}.",
        "[Honestly|Ngl|To be honest], I'm {degree} {sad_feeling} about {upcoming}.",
        "I'm {degree} {happy_feeling} about {upcoming}!",
        "{past_time_cap} I {good_event}, and I'm still {happy_action}.",
        "Why does this always happen to me? I {bad_event} [again|twice this week|on my birthday].",
        "So {happy_feeling} right now, {person} just {person_good_event}!",
        "I {bad_event} and then {bad_news}. [I give up.|What a day.|Send help.]",
    ],
    "scene": [
        "{weather_scene} over {place}, and {scene_detail}.",
        "A {animal} {animal_action} {location_phrase} while {background_detail}.",
        "Sitting on the porch with a {drink}, watching {view}.",
        "{place_cap} is {crowd_state} today; {scene_detail}.",
        "Out my window: {weather_scene_lower}, and {scene_detail}.",
        "We're at {place} and {scene_detail}.",
        "There's a {animal} {location_phrase} and it {animal_action}.",
        "{weather_scene} in {city} tonight, and {scene_detail}.",
        "[Early morning|Late evening|Sunday afternoon] at {place}: {scene_detail}.",
        "The kitchen smells like {food} and {background_detail}.",
    ],
    "request": [
        "[Hey|Hi|Quick question], could you {request_action} and {request_action} {deadline}?",
        "Can you bring {grocery} and {food} to {party_place} {future_time}? {thanks}",
        "Please {request_action} {deadline}. {thanks}",
        "I need you to {request_action} {deadline}, it's important.",
        "Can you {request_action} {deadline}?",
        "Could you pick up {grocery} and {grocery} on your way home?",
        "Please {chore} before {event_time}.",
        "Would you mind {favor}?",
        "Let's {plan_activity} {future_time} — are you in?",
        "[Hey|Hi|Quick favor], can you {request_action}? [Thanks!|Thank you!|You're the best!]",
        "Don't forget to {chore} {deadline}!",
        "Can we {plan_activity} {future_time}? I really need a break.",
        "Remind me to {chore} {deadline}, please.",
        "Want to {plan_activity} with me {future_time}?",
        "If you're at the store, grab {grocery}, please.",
    ],
    "opinion": [
        "{food_is_cap} {opinion_adj}.",
        "Hot take: {thing_is} {opinion_adj}.",
        "Nothing beats {food} on a {weather_day} day.",
        "{activity_cap} is way better than {activity}, fight me.",
        "I think {thing_is} {opinion_adj}, and I won't change my mind.",
        "Unpopular opinion: {food} for breakfast is {opinion_adj}.",
        "[Honestly|Personally|Truly], {thing_is} {opinion_adj}.",
        "{city} is the best city for {activity}, no contest.",
        "I'll take {thing} over {thing} any day.",
        "{thing_is_cap} {opinion_adj}, but {food_is} even better.",
    ],
    "social": [
        "{greeting} {addressee}! {social_plan} {sign_off}",
        "{greeting}, {addressee}! Happy {occasion}! {sign_off}",
        "Thanks for {favor_noun}, {addressee}. {sign_off}",
        "Happy {occasion}, {addressee}! {wish}",
        "Good [morning|night|luck], {addressee}! {wish}",
        "Congrats on {achievement}, {addressee}! {wish}",
        "Thanks so much for {favor_noun}, {addressee}!",
        "Miss you, {addressee}! {social_plan}",
        "Sorry I {social_mistake}, {addressee}. {social_plan}",
        "Welcome home, {addressee}! [We missed you.|The dog missed you.|Dinner's ready.]",
        "Safe travels to {city}, {addressee}!",
        "Get well soon, {addressee}! [Sending soup.|Sending hugs.|Rest up.]",
        "Hey {addressee}, {social_plan_lower}",
        "Thank you for {favor}, you're a lifesaver!",
    ],
    "question": [
        "What should I pack for a trip to {city} in {season}?",
        "How do I get from {landmark} to {place}?",
        "Can {animals_plural} eat {food}?",
        "What's the weather like in {country} in {month}?",
        "How long is the flight from {city} to {city}?",
        "Which is healthier, {food} or {food}?",
        "How do you say \"{phrase}\" in {language}?",
        "What time does the {venue} close on {day}?",
        "When is the best time to visit {country}?",
        "How long does it take to {task}?",
        "What's the best way to {task}?",
        "Why do {animals_plural} {animal_behavior}?",
        "Is it going to {weather_verb} in {city} {future_time}?",
        "What time does the {venue} open on {day}?",
        "Where can I find {item} near {landmark}?",
        "What is {fact_topic} made of?",
        "Who invented {invention}?",
        "How do {animals_plural} {animal_behavior}?",
        "Do you know how to {task}?",
        "What's the capital of {country}?",
        "How far is {city} from {city}?",
        "Is {food} healthy?",
    ],
    "abstract": [
        "{abstract_noun_cap} and {abstract_noun} both need {need}.",
        "{abstract_noun_cap} is {metaphor}, {abstract_tail}.",
        "I think {abstract_noun} is {metaphor}.",
        "{abstract_noun_cap} takes {need}, {abstract_tail}.",
        "{abstract_noun_cap} is like {metaphor}.",
        "The older I get, the more I value {value}.",
        "Every {turning_point}.",
        "{abstract_noun_cap} feels {abstract_feel} when {condition}.",
        "Sometimes {abstract_noun} is just {metaphor}.",
        "Maybe {abstract_noun} is about {value}.",
        "I keep thinking that {abstract_noun} and {abstract_noun} are the same thing.",
        "What if {abstract_noun} is {metaphor}?",
        "{abstract_noun_cap} grows when {condition}.",
    ],
    "complex": [
        "I {good_event} {past_time}, but then {bad_news}, so now I'm {degree} {sad_feeling}.",
        "First {activity}, then {food} for lunch, and tonight we {plan_activity_past}.",
        "Can you {request_action}? Also, {chore_imperative} before {event_time}, and don't forget the {grocery}.",
        "We're flying to {city} {future_time}: {activity} in the morning, {food} at night, and hopefully no rain.",
        "I {bad_event} {past_time}, but {person} {person_good_event}, so it evens out.",
        "It's a {weather_day} day in {city}, the {animal} {animal_action}, and I'm drinking a {drink} by the window.",
        "{person_cap} {person_good_event}, so we're throwing a party {future_time} with {food} and {food}.",
        "After I {bad_event}, {person} brought me {food} and a {drink}, and now I feel {happy_feeling}.",
        "I love {thing}, but {annoyance}, so I'm staying home with {food}.",
    ],
    "edge": [
        "{one_word}{punct}",
        "{one_word_upper}{punct}",
        "Oh great, [{annoyance}|{annoyance_np}]. {sarcastic_tail}",
        "Wow, {annoyance}. {sarcastic_tail}",
        "Sure, because {annoyance_np} is exactly how I wanted to spend [my Saturday|my day off|my birthday|the weekend].",
        "{slang}",
        "{slang}, {errand}",
        "{caps_win}!!!",
        "{food}?",
        "{one_word} again{punct}",
        "yeah no. {annoyance}.",
    ],
}

CATEGORIES = tuple(TEMPLATES)

_SLOT = re.compile(r"\{([a-z_]+)\}")
_CHOICE = re.compile(r"\[([^\[\]]*)\]")
_ARTICLE = re.compile(r"(^A|(?<= )a) (?=[aeiou])")  # "a owl" -> "an owl"; never touches "an A on"
# A suffix derives a slot from a word list: `food_is` -> "tacos are", `food_is_cap` -> "Tacos are".
_CASES = {"_cap": lambda s: s[:1].upper() + s[1:], "_lower": lambda s: s[:1].lower() + s[1:], "_upper": str.upper}
_EXTRA = {
    "plan_activity_past": ["watch a movie", "see the fireworks", "have a game night", "get ice cream", "go bowling", "bake a cake"],
    "chore_imperative": SLOTS["chore"],
}
_SINGULAR_S = {"tennis", "jazz", "hummus", "asparagus"}


def _with_verb(phrase: str) -> str:
    # Plural nouns in the word lists all end in "s" ("tacos", "board games"); few singular ones do.
    plural = phrase.endswith("s") and phrase.split()[-1] not in _SINGULAR_S
    return f"{phrase} {'are' if plural else 'is'}"


def _resolve(slot: str) -> tuple[str, list, object]:
    """(base list name, words, transform) for a slot name with its suffixes."""
    transforms = []
    for suffix, case in _CASES.items():
        if slot.endswith(suffix):
            slot, transforms = slot[: -len(suffix)], [case]
            break
    if slot.endswith("_is") and slot[:-3] in SLOTS:
        slot, transforms = slot[:-3], [_with_verb] + transforms
    words = SLOTS.get(slot) or _EXTRA.get(slot)
    if words is None:
        raise KeyError(slot)

    def transform(word: str) -> str:
        for t in transforms:
            word = t(word)
        return word

    return slot, words, transform


def expand(template: str, rng: random.Random) -> str:
    """Fill every choice and slot of a template (recursively), then tidy spacing, articles and the first letter.

    A word list is never drawn twice for one message with the same word ("jazz over jazz").
    """
    used: dict[str, set[str]] = {}

    def pick(match: re.Match) -> str:
        base, words, transform = _resolve(match.group(1))
        seen = used.setdefault(base, set())
        word = rng.choice(words)
        for _ in range(6):
            if word not in seen:
                break
            word = rng.choice(words)
        seen.add(word)
        return transform(word)

    text = template
    for _ in range(8):  # slots may contain slots; a few rounds suffice
        text = _CHOICE.sub(lambda m: rng.choice(m.group(1).split("|")), text)
        text, n = _SLOT.subn(pick, text)
        if not n:
            break
    text = re.sub(r"\s+", " ", text).strip()
    text = _ARTICLE.sub(lambda m: m.group(1) + "n ", text)
    return text[:1].upper() + text[1:]


def generate(category: str, rng: random.Random) -> str:
    return expand(rng.choice(TEMPLATES[category]), rng)


def check_templates() -> None:
    """Every slot a template names exists (called by the tests)."""
    for category, templates in TEMPLATES.items():
        for template in templates:
            for slot in _SLOT.findall(template):
                try:
                    _resolve(slot)
                except KeyError:
                    raise KeyError(f"{category}: template {template!r} uses unknown slot {slot!r}") from None


_TOKEN = re.compile(r"\{([a-z_]+)\}|\[([^\[\]]*)\]")


def _combinations(text: str, depth: int = 0) -> int:
    if depth > 8:
        return 1
    total = 1
    for match in _TOKEN.finditer(text):
        if match.group(1):
            total *= sum(_combinations(w, depth + 1) for w in _resolve(match.group(1))[1])
        else:
            total *= sum(_combinations(a, depth + 1) for a in match.group(2).split("|"))
    return total


def combinations(category: str) -> int:
    """An upper bound on the distinct messages of a category: every template's slot and
    choice combinations (the prompt source's capacity, checked at validation)."""
    return sum(_combinations(t) for t in TEMPLATES[category])
