"""Prompt texts of the Claude components and the parsing of their replies."""

from __future__ import annotations

import random
import re

# The prompt source's categories (name -> what such messages are like).
CATEGORIES: dict[str, str] = {
    "emotional": "emotional statements: someone sharing how they feel (joy, grief, anxiety, pride, frustration, love)",
    "scene": "descriptions of scenes: what someone sees, where they are, what is happening around them",
    "request": "requests: asking someone to do something, favours, instructions, invitations",
    "opinion": "opinions: views, judgements, recommendations and complaints about things",
    "social": "greetings and social messages: hellos, goodbyes, thanks, congratulations, apologies, small talk",
    "question": "factual questions: asking how, why, when, where or what about the world",
    "abstract": "abstract ideas: thoughts about time, freedom, change, memory, luck, meaning",
    "complex": "complex multi-part messages: two or three connected points in one message (news plus a plan, a feeling plus a request)",
    "edge": "edge cases: one-word messages, sarcastic or ironic remarks, very short replies, exclamations, typos and slang",
}

# Varied themes keep repeated requests for one category from converging on the same messages.
THEMES = (
    "work and careers", "school and exams", "family", "friendship", "romance", "food and cooking", "travel",
    "weather and seasons", "sport", "music", "films and TV", "books", "health and fitness", "pets and animals",
    "money and shopping", "technology and phones", "the city", "nature and the outdoors", "the home", "holidays and festivals",
    "science", "history", "art", "games", "cars and commuting", "the sea", "parties", "childhood", "getting older", "moving house",
    "hobbies", "gardening", "sleep", "mornings", "the news", "neighbours", "weddings", "birthdays", "illness and recovery", "space",
)

PROMPTS_SYSTEM = (
    "You write realistic chat messages for a dataset. Each message is something a real person might type to a friend, "
    "a colleague or an assistant: natural, specific, varied in length, tone and vocabulary. You output only the "
    "messages, one per line, with no numbering, quotes, headings or commentary."
)

PROMPTS_REQUEST = (
    "Write {k} different messages in this category: {description}.\n"
    "Themes to draw on (mix them, do not mention them literally): {themes}.\n"
    "Vary the length from a single word to three sentences, and vary who is writing and to whom.\n"
    "{avoid}"
    "One message per line, nothing else."
)

TEACHER_SYSTEM = (
    "You translate messages into emoji. Reply with 2 to 8 emoji that together convey the meaning of the message, "
    "in a sensible order. Use only emoji: no words, letters, digits, punctuation or explanation."
)

JUDGE_SYSTEM = (
    "You are playing a guessing game. Someone has a short message in mind and is describing it to you using only "
    "emoji. Reconstruct the original message as exactly as you can. Reply with your guess of the message only: one "
    "short line, no explanation, no quotes."
)
JUDGE_FIRST_TURN = "Emoji: {emoji}\nWhat is the message?"
JUDGE_NEXT_TURN = (
    "That guess was not right. More emoji to correct it: {emoji}\n"
    "Using all the emoji so far, what is the message?"
)


def generation_request(description: str, k: int, rng: random.Random, avoid: list[str]) -> str:
    themes = ", ".join(rng.sample(THEMES, 4))
    avoid_text = ""
    if avoid:
        listed = "\n".join(f"- {a}" for a in avoid)
        avoid_text = f"Do not repeat or paraphrase these existing messages:\n{listed}\n"
    return PROMPTS_REQUEST.format(k=k, description=description, themes=themes, avoid=avoid_text)


_BULLET = re.compile(r"^\s*(?:[-*\u2022]+|\(?\d{1,3}[.):]|#+)\s*")
_QUOTES = "\"'\u201c\u201d\u2018\u2019`"


def parse_message_lines(text: str, max_chars: int) -> list[str]:
    """One message per line: bullets, numbering and wrapping quotes removed; headings and overlong lines dropped."""
    found = []
    for line in text.splitlines():
        line = _BULLET.sub("", line).strip()
        if len(line) >= 2 and line[0] in _QUOTES and line[-1] in _QUOTES:
            line = line[1:-1].strip()
        # A preface such as "Here are 40 messages:" is not a message.
        if not line or len(line) > max_chars or (line.endswith(":") and len(line.split()) > 2):
            continue
        found.append(line)
    return found


def dedup_key(text: str) -> str:
    """Messages that differ only in case, spacing or trailing punctuation count as one."""
    return " ".join(text.casefold().split()).rstrip(".!?\u2026 ")
