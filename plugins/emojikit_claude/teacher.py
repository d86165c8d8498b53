"""The `claude` teacher: emoji answers from Claude, in bulk through the Message Batches API.

Resumable and never paying twice, through two files in the run directory:
  claude_batches.json  every batch created (id and the custom ids it covers): recorded as
                       "creating" (with the fingerprint of its requests) before the create
                       call, and with its id right after the call returns; a re-run polls
                       and fetches these first. A create whose reply was lost (connection
                       dropped after the server made the batch, or the process killed) is
                       looked for by listing batches before the create is retried (and on
                       the re-run), so a batch is never created twice unrecorded
  claude_answers.jsonl one line per answered custom id: the emoji, or only the reason it was
                       dropped (an invalid answer's text is never written)
A custom id is a hash of everything that shapes the answer (model, prompt, settings, message),
so results map back to messages whatever their order, and a changed prompt never reuses an
old answer. Errored, expired and canceled batch items are not billed, so they are not
recorded: a re-run asks for them again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Optional, Sequence

from emojikit.api import emojis
from emojikit.api.components import BuildContext, Message
from emojikit.api.errors import RemoteServiceError
from emojikit.support.io import append_jsonl, atomic_write_text, read_jsonl
from emojikit_claude.client import APICallError, Backoff, make_client, text_of
from emojikit_claude.settings import ClaudeTeacherConfig

log = logging.getLogger(__name__)

BATCHES_FILE = "claude_batches.json"
ANSWERS_FILE = "claude_answers.jsonl"
NOT_BILLED = ("errored", "expired", "canceled", "missing")
# A batch the server made for a lost create reply is listed as created no earlier than this
# before our first attempt (room for the difference between our clock and the server's).
CLOCK_SKEW = timedelta(minutes=10)
DONE = ("fetched", "not_created")  # batch records with nothing left to wait for


def fingerprint(custom_ids: Sequence[str]) -> str:
    """The requests of a batch, as one hash: each custom id already hashes everything that
    shapes its answer, so the sorted set of them names the batch's requests."""
    return hashlib.sha256("\n".join(sorted(custom_ids)).encode("ascii")).hexdigest()[:32]


class ClaudeTeacher:
    def __init__(self, cfg: ClaudeTeacherConfig, ctx: BuildContext, client=None):
        self.cfg = cfg
        self.client = client if client is not None else make_client(cfg, "the claude teacher")
        self.backoff = Backoff.from_config(cfg)
        self.backoff.notify = self.say
        self.sleep = time.sleep  # between batch polls; tests replace it
        self.run_dir: Optional[Path] = Path(ctx.run_dir) if ctx.run_dir is not None else None
        self._known: dict[str, dict] = {}  # custom id -> {"emoji": ...} or {"dropped": reason}
        self._batches: list[dict] = []
        self._load_state()
        # Outcome counts of the last answer() call, plus what it cost (requests, batches).
        self.stats: Counter[str] = Counter()

    def say(self, text: str) -> None:
        """A line for the user while they wait (batch id, state, retries), on stderr."""
        log.info("claude teacher: %s", text)
        print(f"claude teacher: {text}", file=sys.stderr, flush=True)

    # -- state files ---------------------------------------------------------------------

    def _path(self, name: str) -> Optional[Path]:
        return self.run_dir / name if self.run_dir is not None else None

    def _load_state(self) -> None:
        answers, batches = self._path(ANSWERS_FILE), self._path(BATCHES_FILE)
        if answers is not None and answers.exists():
            for row in read_jsonl(answers, tolerate_torn_tail=True):
                self._known[row["id"]] = row
        if batches is not None and batches.exists():
            self._batches = json.loads(batches.read_text(encoding="utf-8"))["batches"]

    def _save_batches(self) -> None:
        path = self._path(BATCHES_FILE)
        if path is not None:
            atomic_write_text(path, json.dumps({"batches": self._batches}, indent=1) + "\n")

    def _record(self, custom_id: str, outcome: dict) -> None:
        """Keep a billed outcome (in memory and in the answers file)."""
        self._known[custom_id] = {"id": custom_id, **outcome}
        path = self._path(ANSWERS_FILE)
        if path is not None:
            append_jsonl(path, self._known[custom_id])

    # -- requests ------------------------------------------------------------------------

    def custom_id(self, text: str) -> str:
        cfg = self.cfg
        shape = json.dumps([cfg.model, cfg.system, cfg.max_tokens, text], ensure_ascii=False)
        # The API allows [a-zA-Z0-9_-]{1,64}.
        return "m-" + hashlib.sha256(shape.encode("utf-8")).hexdigest()[:32]

    def _params(self, text: str) -> dict:
        cfg = self.cfg
        return {
            "model": cfg.model,
            "max_tokens": cfg.max_tokens,
            "system": cfg.system,
            "messages": [{"role": "user", "content": text}],
        }

    def _outcome(self, reply_text: str) -> dict:
        if emojis.is_emoji_only(reply_text, self.cfg.min_emoji, self.cfg.max_emoji):
            return {"emoji": "".join(emojis.split(reply_text))}  # without the spaces between emoji
        return {"dropped": "invalid"}

    # -- the Teacher interface -------------------------------------------------------------

    def answer(self, messages: Sequence[Message]) -> list[Optional[str]]:
        ids = [self.custom_id(m.text) for m in messages]
        texts = dict(zip(ids, (m.text for m in messages)))  # duplicates are asked once
        self.stats = Counter()
        unbilled: dict[str, str] = {}  # custom id -> why there is no answer this time

        def pending() -> list[str]:
            return [i for i in texts if i not in self._known and i not in unbilled]

        self.stats["cached"] = len(texts) - len(pending())
        # An earlier run's batches first: they are paid for already.
        for batch in self._batches:
            if batch["status"] == "creating" and set(batch["custom_ids"]) & set(pending()):
                self._adopt_lost_create(batch)  # found: submitted; else not_created (asked again below)
            if batch["status"] not in DONE and set(batch["custom_ids"]) & set(pending()):
                unbilled.update(self._finish_batch(batch))

        todo = pending()
        if todo and len(todo) < self.cfg.batch_threshold:
            unbilled.update(self._answer_directly(todo, texts))
        elif todo:
            new = [self._create_batch(todo[i : i + self.cfg.max_batch_size], texts) for i in range(0, len(todo), self.cfg.max_batch_size)]
            for batch in new:
                unbilled.update(self._finish_batch(batch))

        for cid in texts:
            outcome = self._known.get(cid, {})
            if "emoji" in outcome:
                self.stats["valid"] += 1
            else:  # "invalid" (billed, on file) or errored/expired/canceled/missing (unbilled, asked again next run)
                self.stats[outcome.get("dropped") or unbilled.get(cid, "missing")] += 1
        log.info("claude teacher: %s", dict(self.stats))
        return [self._known.get(cid, {}).get("emoji") for cid in ids]

    # -- small jobs: the Messages API --------------------------------------------------------

    def _ask(self, text: str):
        return self.backoff.call(lambda: self.client.messages.create(**self._params(text)), "teacher message")

    def _answer_directly(self, todo: list[str], texts: dict[str, str]) -> dict[str, str]:
        """Each answer is recorded as it arrives, so a failure part-way never pays again for
        what came back; after a failure that stops the run, requests not yet sent are not sent."""
        unbilled: dict[str, str] = {}
        failure: Optional[BaseException] = None
        with ThreadPoolExecutor(max_workers=self.cfg.concurrency) as pool:
            futures = {pool.submit(self._ask, texts[cid]): cid for cid in todo}
            for future in as_completed(futures):
                cid = futures[future]
                if future.cancelled():
                    continue
                self.stats["requests"] += 1
                try:
                    reply = future.result()
                except APICallError as exc:
                    # A request the API rejects (400) fails alone; anything else stops the run.
                    if exc.status != 400:
                        if failure is None:
                            failure = exc
                            for pending in futures:
                                pending.cancel()
                        continue
                    unbilled[cid] = "errored"
                    continue
                self._record(cid, self._outcome(text_of(reply)))
        if failure is not None:
            raise failure
        return unbilled

    # -- bulk: the Message Batches API -------------------------------------------------------

    def _create_batch(self, chunk: list[str], texts: dict[str, str]) -> dict:
        requests = [{"custom_id": cid, "params": self._params(texts[cid])} for cid in chunk]
        batch = {
            "id": None,
            "status": "creating",
            "model": self.cfg.model,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "fingerprint": fingerprint(chunk),
            "custom_ids": chunk,
        }
        self._batches.append(batch)
        self._save_batches()  # before the call: a lost reply (or a kill) leaves a record to look for
        attempts = 0

        def create():
            nonlocal attempts
            attempts += 1
            # A retry after a failed create: the server may have made the batch and lost the reply.
            if attempts > 1 and (found := self._find_created(batch)) is not None:
                return found, "batches_found"
            return self.client.messages.batches.create(requests=requests), "batches_created"

        created, how = self.backoff.call(create, "create message batch")
        self.stats[how] += 1
        batch.update(id=created.id, status="submitted")
        self._save_batches()  # before anything else can fail: the batch is paid for
        log.info("claude teacher: created batch %s with %d requests", created.id, len(chunk))
        return batch

    def _find_created(self, batch: dict):
        """The server's batch for a create whose reply was lost, or None. Batches are listed
        newest first back to our first attempt (less CLOCK_SKEW); one not recorded here with as
        many requests is a candidate. An ended candidate is checked against the fingerprint of
        its results' custom ids; one still in progress cannot show its requests, so the oldest
        such candidate is taken (its results are matched by custom id when fetched: anything
        not ours is ignored, and ours missing from it are asked again)."""
        since = datetime.fromisoformat(batch["created_at"]) - CLOCK_SKEW
        recorded = {b["id"] for b in self._batches if b.get("id")}
        unverified = []
        for listed in self.client.messages.batches.list(limit=100):
            if listed.created_at < since:
                break  # newest first: the rest are older than our first attempt
            counts = listed.request_counts.model_dump()
            if listed.id in recorded or sum(counts.values()) != len(batch["custom_ids"]):
                continue
            if listed.processing_status == "ended":
                ids = [item.custom_id for item in self.client.messages.batches.results(listed.id)]
                if fingerprint(ids) == batch["fingerprint"]:
                    self.say(f"create message batch: reply lost; found batch {listed.id} (its requests match), recorded it")
                    return listed
                continue
            unverified.append(listed)
        if unverified:
            found = unverified[-1]
            self.say(f"create message batch: reply lost; found batch {found.id} ({len(batch['custom_ids'])} requests, created since), recorded it")
            return found
        return None

    def _adopt_lost_create(self, batch: dict) -> None:
        """An earlier run recorded a create but not its reply: look the batch up by listing."""
        found = self.backoff.call(lambda: self._find_created(batch), "list message batches")
        if found is None:
            self.say(f"an earlier create of a batch of {len(batch['custom_ids'])} requests left no batch; creating it again")
            batch["status"] = "not_created"
        else:
            batch.update(id=found.id, status="submitted")
        self._save_batches()

    def _finish_batch(self, batch: dict) -> dict[str, str]:
        """Poll until the batch ends, then record its results; returns the unbilled outcomes."""
        batch_id = batch["id"]
        started = time.monotonic()
        while True:
            state = self.backoff.call(lambda: self.client.messages.batches.retrieve(batch_id), "poll message batch")
            waited = time.monotonic() - started
            counts = getattr(state, "request_counts", None)
            shown = f" ({', '.join(f'{k} {v}' for k, v in counts.model_dump().items() if v)})" if counts is not None else ""
            self.say(f"batch {batch_id} {state.processing_status}{shown}; waited {waited:.0f}s")
            if state.processing_status == "ended":
                break
            if waited >= self.cfg.max_wait_s:
                raise RemoteServiceError(
                    f"message batch {batch_id} is still {state.processing_status} after {waited:.0f}s; "
                    f"its id is recorded in {BATCHES_FILE}, re-run with --resume to pick it up"
                )
            self.sleep(self.cfg.poll_interval_s)

        expected = set(batch["custom_ids"])
        results = self.backoff.call(lambda: list(self.client.messages.batches.results(batch_id)), "fetch batch results")
        unbilled: dict[str, str] = {}
        for item in results:
            cid = item.custom_id
            if cid not in expected:
                log.warning("claude teacher: batch %s returned an unknown custom id %r; ignored", batch_id, cid)
                continue
            expected.discard(cid)
            if item.result.type == "succeeded":
                self._record(cid, self._outcome(text_of(item.result.message)))
            else:
                unbilled[cid] = item.result.type
        for cid in expected:
            unbilled[cid] = "missing"
        batch["status"] = "fetched"
        self._save_batches()
        return unbilled
