"""The `claude` prompt source: category-balanced chat messages generated with the Messages API.

Every new message is appended to a JSONL file (default <run dir>/claude_prompts.jsonl) as soon
as it arrives, so an interrupted run loses at most the requests in flight, and a re-run only
asks for what each category still lacks.
"""

from __future__ import annotations

import logging
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Iterator, Optional

from emojikit.api.components import BuildContext, Message
from emojikit.api.errors import ConfigError
from emojikit.support.io import append_jsonl, read_jsonl
from emojikit_claude import prompts
from emojikit_claude.client import Backoff, make_client, text_of
from emojikit_claude.settings import ClaudePromptsConfig

log = logging.getLogger(__name__)

PROMPTS_FILE = "claude_prompts.jsonl"
AVOID_SHOWN = 15  # existing messages shown per request, so Claude does not repeat them


def quotas(total: int, categories: list[str]) -> dict[str, int]:
    """Split total as evenly as possible (the first categories take the remainder)."""
    base, extra = divmod(total, len(categories))
    return {c: base + (1 if i < extra else 0) for i, c in enumerate(categories)}


class ClaudePromptSource:
    def __init__(self, cfg: ClaudePromptsConfig, ctx: BuildContext, client=None):
        if not cfg.categories:
            raise ConfigError("[prompts] categories: at least one category is needed")
        self.cfg = cfg
        self.seed = ctx.seed
        if cfg.file is not None:
            self.path = Path(cfg.file)
        elif ctx.run_dir is not None:
            self.path = Path(ctx.run_dir) / PROMPTS_FILE
        else:
            raise ConfigError("[prompts] file: needed when there is no run directory")
        self.client = client if client is not None else make_client(cfg, "the claude prompt source")
        self.backoff = Backoff.from_config(cfg)
        self.requests = 0  # Messages API calls made by this object

    def _load(self) -> tuple[dict[str, list[str]], set[str]]:
        have: dict[str, list[str]] = {c: [] for c in self.cfg.categories}
        seen: set[str] = set()
        if self.path.exists():
            for row in read_jsonl(self.path, tolerate_torn_tail=True):
                key = prompts.dedup_key(row["text"])
                if key in seen:
                    continue
                seen.add(key)
                if row.get("category") in have:
                    have[row["category"]].append(row["text"])
        return have, seen

    def _generate(self, category: str, k: int, avoid: list[str], rng: random.Random) -> list[str]:
        request = prompts.generation_request(self.cfg.categories[category], k, rng, avoid)
        reply = self.backoff.call(
            lambda: self.client.messages.create(
                model=self.cfg.model,
                max_tokens=self.cfg.max_tokens,
                system=prompts.PROMPTS_SYSTEM,
                messages=[{"role": "user", "content": request}],
            ),
            f"generate {category} messages",
        )
        return prompts.parse_message_lines(text_of(reply), self.cfg.max_chars)

    def fill(self, total: int) -> dict[str, list[str]]:
        """Generate until every category has its share of `total` (or stalls); returns what is on file."""
        have, seen = self._load()
        want = quotas(total, list(self.cfg.categories))
        stalled = {c: 0 for c in want}
        round_no = 0
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency) as pool:
            while True:
                open_cats = [c for c in want if len(have[c]) < want[c] and stalled[c] < self.cfg.stall_rounds]
                if not open_cats:
                    break
                futures = {}
                for c in open_cats:
                    # Seeded per (seed, category, round, size on file) so a resumed run varies its themes too.
                    rng = random.Random(f"{self.seed}/{c}/{round_no}/{len(have[c])}")
                    k = min(self.cfg.per_request, want[c] - len(have[c]))
                    avoid = rng.sample(have[c], min(AVOID_SHOWN, len(have[c])))
                    futures[c] = pool.submit(self._generate, c, k, avoid, rng)
                failure: Optional[BaseException] = None
                for c, future in futures.items():
                    self.requests += 1
                    try:
                        lines = future.result()
                    except Exception as exc:  # keep the other categories' (paid) replies first
                        failure = failure or exc
                        continue
                    added = 0
                    for text in lines:
                        key = prompts.dedup_key(text)
                        if key in seen or len(have[c]) >= want[c]:
                            continue
                        seen.add(key)
                        have[c].append(text)
                        append_jsonl(self.path, {"text": text, "category": c})
                        added += 1
                    stalled[c] = 0 if added else stalled[c] + 1
                if failure is not None:
                    raise failure
                round_no += 1
        short = {c: want[c] - len(have[c]) for c in want if len(have[c]) < want[c]}
        if short:
            log.warning("claude prompts: categories stopped producing new messages, short by %s", short)
        return have

    def messages(self, n: Optional[int] = None) -> Iterator[Message]:
        total = n if n is not None else self.cfg.count
        have = self.fill(total)
        want = quotas(total, list(self.cfg.categories))
        # Interleave categories so any prefix of the stream stays balanced.
        queues = {c: have[c][: want[c]] for c in want}
        produced, depth = 0, 0
        while produced < total and any(depth < len(q) for q in queues.values()):
            for c, q in queues.items():
                if depth < len(q) and produced < total:
                    yield Message(q[depth], c)
                    produced += 1
            depth += 1
