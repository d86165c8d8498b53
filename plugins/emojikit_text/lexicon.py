"""The offline teacher: emoji chosen by MiniLM similarity between a message and emoji names.

Greedy top-k by similarity to the whole message answers every happy message with four
smiling faces. Instead the teacher
  1. splits the message into key phrases (runs of content words between stopwords and
     punctuation) so "got promoted" and "can't stop smiling" are each heard,
  2. picks emoji one at a time by maximal marginal relevance: relevance is the similarity to
     the message plus the best still-uncovered phrase gain (a phrase an earlier pick already
     matches gains little), minus the similarity to the emoji already picked,
  3. refuses near-duplicates: one emoji per family (man/woman/person variants), no two whose
     names are too alike, at most a couple of faces, and no flags unless a country is named,
  4. by default puts the picks in the order of the phrases they match ("student loans ... bus
     ... sad" -> 💵🧑‍🎓🚌😥): a small student learns this left-to-right mapping faster than
     the order of picking (see the README's SFT results).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal, Optional, Sequence

import numpy as np
from pydantic import Field, model_validator

from emojikit.api import emojis
from emojikit.api.components import BuildContext, Message
from emojikit.api.config import ConfigModel
from emojikit.support.io import atomic_path

STOPWORDS = frozenset(
    """
    a an the and or but so if then than because as of at by for with about into onto from to in on off up out over
    under again once just very really super totally honestly kind little bit i me my mine we us our you your yours he
    him his she her it its they them their this that these those there here is am are was were be been being have has
    had do does did got get gets getting can can't cannot could would should will won't wouldn't don't doesn't didn't
    isn't aren't wasn't i'm i've i'll i'd you're we're it's that's there's let's what's who what when where why how
    which all any some no not too also still now today tonight yet ever even more most much many such only own same
    other each every both few ok okay oh wow hey hi yeah please thanks thank before after during while like between
    until since around through near without within across behind
    believe guess think thinking keep want wanted go going gone come coming say said sure exactly way better best worth
    thing things stuff need make made take took back last next first finally always never maybe actually right well
    whole anyone everyone nobody someone something nothing lot lots bit one two three four five six seven eight nine ten
    tomorrow yesterday week weekend minute minutes hour hours ago monday tuesday wednesday thursday friday saturday sunday
    """.split()
)
_WORD = re.compile(r"[A-Za-z0-9']+|[^\sA-Za-z0-9']")
_GENDER = frozenset({"man", "woman", "men", "women", "person", "people"})
# Emoji that match words literally but rarely carry a message: letter buttons ("O button"
# for "ugh"), clock faces for every number, arrows and geometric shapes.
_EXCLUDED_NAME_PARTS = ("Japanese", "regional indicator", " button", "o’clock", "-thirty", "arrow", "square", "triangle")


class LexiconConfig(ConfigModel):
    min_emoji: int = Field(2, ge=1, le=8, description="Fewest emoji in an answer.")
    max_emoji: int = Field(8, ge=1, le=8, description="Most emoji in an answer.")
    mmr_lambda: float = Field(0.7, ge=0.0, le=1.0, description="Relevance vs novelty in maximal marginal relevance (1 = relevance only).")
    message_weight: float = Field(0.5, ge=0.0, le=1.0, description="Share of relevance from the whole message; the rest is the best uncovered key-phrase gain.")
    min_relevance: float = Field(0.15, description="After min_emoji, stop when the best candidate's relevance falls below this.")
    duplicate_similarity: float = Field(0.72, description="Never pick two emoji whose names are at least this similar.")
    max_faces: int = Field(2, ge=0, description="Most '... face' emoji in one answer (faces match every feeling).")
    max_phrases: int = Field(7, ge=1, description="Most key phrases taken from one message.")
    candidates: int = Field(80, ge=8, description="Emoji considered per message (the best by similarity to any query).")
    batch_size: int = Field(512, ge=1, description="Messages encoded together.")
    order: Literal["message", "relevance"] = Field("message", description="Answer order: 'message' follows the key phrases each emoji matches best, left to right; 'relevance' is the order of picking.")

    @model_validator(mode="after")
    def _range(self) -> "LexiconConfig":
        if self.min_emoji > self.max_emoji:
            raise ValueError(f"min_emoji ({self.min_emoji}) is greater than max_emoji ({self.max_emoji})")
        return self


def key_phrases(text: str, limit: int = 7) -> list[str]:
    """Runs of content words between stopwords and punctuation, in order, deduplicated."""
    phrases, run = [], []
    for token in _WORD.findall(text):
        word = token.lower()
        if word[0].isalnum() and word not in STOPWORDS and not word.isdigit():
            run.append(word)
            continue
        if run:
            phrases.append(" ".join(run))
            run = []
    if run:
        phrases.append(" ".join(run))
    return list(dict.fromkeys(phrases))[:limit]


def family(name: str) -> str:
    """Variants that differ in gender or hair share a family: "woman cook" -> "cook"."""
    head, _, tail = name.partition(":")
    words = [w for w in head.replace("facing right", "").split() if w not in _GENDER]
    if not words:
        words = [w for w in tail.replace(",", " ").split() if w not in _GENDER]
    return " ".join(words) or name


@dataclass
class Inventory:
    seqs: list[str]  # one emoji per family, flags included (only used when a country is named)
    names: list[str]
    is_flag: np.ndarray  # [E] bool
    is_face: np.ndarray  # [E] bool
    family_id: np.ndarray  # [E] int, equal for variants of one emoji
    text_owner_starts: np.ndarray  # [E] index of each emoji's first text in the text table
    text_emb_T_D: np.ndarray  # every name and alias, grouped by emoji
    name_sim_E_E: np.ndarray  # similarity between emoji names
    country_flags: dict[str, int]  # lower-case country name -> emoji index


def _texts_for(info: emojis.EmojiInfo) -> list[str]:
    texts = [info.name]
    if not emojis.is_flag(info.emoji):
        for alias in info.aliases:
            alias = re.sub(r"\d+", "", alias).strip()
            if alias and alias.lower() != info.name.lower():
                texts.append(alias)
    return list(dict.fromkeys(texts))


def _pick_families(seqs: Sequence[str]) -> list[str]:
    """One emoji per family; prefer the gender-neutral, then the shortest sequence."""
    best: dict[str, str] = {}
    for seq in seqs:
        key = family(emojis.name(seq))
        current = best.get(key)
        rank = (any(w in _GENDER - {"person", "people"} for w in emojis.name(seq).split()), len(seq), seq)
        if current is None or rank < (any(w in _GENDER - {"person", "people"} for w in emojis.name(current).split()), len(current), current):
            best[key] = seq
    return sorted(best.values())


def load_inventory(encode) -> Inventory:
    from emojikit.support.bundled import cache_dir

    seqs = [
        s
        for s in emojis.inventory(exclude_skin_tones=True, exclude_keycaps=True)
        if not any(part in emojis.name(s) for part in _EXCLUDED_NAME_PARTS)
    ]
    seqs = _pick_families(seqs)
    infos = [emojis.info(s) for s in seqs]
    texts, starts = [], []
    for info in infos:
        starts.append(len(texts))
        texts.extend(_texts_for(info))
    # The inventory embeddings are cached on disk, keyed by the exact text table.
    digest = hashlib.sha1("\n".join(texts).encode("utf-8")).hexdigest()[:16]
    path = cache_dir("lexicon") / f"names-minilm-{digest}.npy"
    if path.exists():
        text_emb = np.load(path)
    else:
        text_emb = encode(texts).astype(np.float32)
        with atomic_path(path, suffix=".npy") as tmp:
            np.save(tmp, text_emb)
    starts_arr = np.asarray(starts)
    name_emb = text_emb[starts_arr]  # the first text of each emoji is its CLDR name
    flags = np.array([emojis.is_flag(s) for s in seqs])
    family_ids: dict[str, int] = {}
    country_flags = {}
    for i, info in enumerate(infos):
        if flags[i]:
            for label in (info.name, *info.aliases):
                if len(label) >= 4 and not label.lower().startswith("flag"):
                    country_flags[label.lower()] = i
    return Inventory(
        seqs=seqs,
        names=[i.name for i in infos],
        is_flag=flags,
        is_face=np.array([" face" in f" {i.name}" for i in infos]),
        family_id=np.array([family_ids.setdefault(family(i.name), len(family_ids)) for i in infos]),
        text_owner_starts=starts_arr,
        text_emb_T_D=text_emb,
        name_sim_E_E=name_emb @ name_emb.T,
        country_flags=country_flags,
    )


class LexiconTeacher:
    def __init__(self, config: LexiconConfig, embedder=None):
        from emojikit.play.embedding import get_minilm

        self.config = config
        self.embedder = embedder or get_minilm()
        self.inventory = load_inventory(lambda texts: self.embedder.encode(texts, cache=False))

    def answer(self, messages: Sequence[Message]) -> list[Optional[str]]:
        out: list[Optional[str]] = []
        size = self.config.batch_size
        for start in range(0, len(messages), size):
            out.extend(self._answer_batch(messages[start : start + size]))
        return out

    def _answer_batch(self, messages: Sequence[Message]) -> list[Optional[str]]:
        queries = [[m.text] + key_phrases(m.text, self.config.max_phrases) for m in messages]
        flat = [q for qs in queries for q in qs]
        emb_Q_D = self.embedder.encode(flat)
        # Best match over each emoji's name and aliases.
        sim_Q_E = np.maximum.reduceat(emb_Q_D @ self.inventory.text_emb_T_D.T, self.inventory.text_owner_starts, axis=1)
        answers, row = [], 0
        for message, qs in zip(messages, queries):
            answers.append(self._select(message.text, sim_Q_E[row : row + len(qs)]))
            row += len(qs)
        return answers

    def _named_flags(self, text: str) -> set[int]:
        lowered = f" {text.lower()} "
        return {i for country, i in self.inventory.country_flags.items() if re.search(rf"(?<![a-z]){re.escape(country)}(?![a-z])", lowered)}

    def _select(self, text: str, sim_Q_E: np.ndarray) -> Optional[str]:
        cfg, inv = self.config, self.inventory
        allowed_flags = self._named_flags(text) if any(c.isupper() for c in text) else set()
        best_E = np.where(inv.is_flag, -np.inf, sim_Q_E.max(axis=0))
        flag_bonus_E = np.zeros(len(best_E), dtype=np.float32)
        for i in allowed_flags:  # a named country is worth its flag
            flag_bonus_E[i] = 0.3
            best_E[i] = sim_Q_E[:, i].max() + 0.3
        cands_C = np.argsort(-best_E, kind="stable")[: cfg.candidates]
        cands_C = cands_C[np.isfinite(best_E[cands_C])]

        message_C = sim_Q_E[0, cands_C]
        phrases_P_C = sim_Q_E[1:, cands_C] if len(sim_Q_E) > 1 else sim_Q_E[:1, cands_C]
        name_sim_C_E = inv.name_sim_E_E[cands_C]
        family_C = inv.family_id[cands_C]
        face_C = inv.is_face[cands_C]
        bonus_C = flag_bonus_E[cands_C]
        covered_P = np.zeros(len(phrases_P_C), dtype=np.float32)
        target = min(cfg.max_emoji, max(cfg.min_emoji, len(phrases_P_C) + 1))
        chosen: list[int] = []  # emoji indices
        open_C = np.ones(len(cands_C), dtype=bool)
        redundancy_C = np.zeros(len(cands_C), dtype=np.float32)
        faces = 0
        while len(chosen) < target:
            usable_C = open_C & (redundancy_C < cfg.duplicate_similarity)
            if faces >= cfg.max_faces:
                usable_C &= ~face_C
            if not usable_C.any():
                break
            gain_C = np.maximum(phrases_P_C - covered_P[:, None], 0.0).max(axis=0)
            relevance_C = cfg.message_weight * message_C + (1 - cfg.message_weight) * gain_C + bonus_C
            score_C = cfg.mmr_lambda * relevance_C - (1 - cfg.mmr_lambda) * redundancy_C
            score_C = np.where(usable_C, score_C, -np.inf)
            best = int(np.argmax(score_C))  # first maximum: deterministic
            if len(chosen) >= cfg.min_emoji and relevance_C[best] < cfg.min_relevance:
                break
            chosen.append(int(cands_C[best]))
            open_C &= family_C != family_C[best]
            faces += bool(face_C[best])
            covered_P = np.maximum(covered_P, phrases_P_C[:, best])
            redundancy_C = np.maximum(redundancy_C, name_sim_C_E[:, cands_C[best]])
        if len(chosen) < cfg.min_emoji:
            return None
        if cfg.order == "message" and len(sim_Q_E) > 1:
            phrase_of = {c: int(np.argmax(sim_Q_E[1:, c])) for c in chosen}
            chosen.sort(key=lambda c: phrase_of[c])  # stable: picks on one phrase keep their order
        return "".join(inv.seqs[c] for c in chosen)


def build(config: LexiconConfig, ctx: BuildContext) -> LexiconTeacher:
    return LexiconTeacher(config)
