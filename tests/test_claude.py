"""The Claude components against a fake Anthropic server on 127.0.0.1, through the real SDK.

The fake speaks the endpoints the components use (POST /v1/messages, POST /v1/messages/batches,
GET /v1/messages/batches/{id}, GET its results_url as JSONL), can answer with queued errors,
and counts every request, so retries, resumption and "never pays twice" are asserted on the wire.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections import Counter, defaultdict, deque
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.api import emojis
from emojikit.api.components import BuildContext, JudgeView, Message
from emojikit.api.errors import MissingCredentialError, RemoteServiceError
from emojikit_claude import prompts
from emojikit_claude.client import Backoff
from emojikit_claude.judge import ClaudeJudge
from emojikit_claude.settings import ClaudeJudgeConfig, ClaudePromptsConfig, ClaudeTeacherConfig
from emojikit_claude.source import ClaudePromptSource
from emojikit_claude.teacher import ANSWERS_FILE, BATCHES_FILE, ClaudeTeacher

FAKE_KEY = "sk-ant-fake-KEY-0123456789-never-written"
REPO = Path(__file__).resolve().parents[1]
STAMP = "2025-01-01T00:00:00Z"


class FakeAnthropic:
    """State of the fake server; tests script replies and read counts from it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.calls: list[tuple[str, str]] = []  # (route, path) of every request, errors included
        self.message_bodies: list[dict] = []
        self.failures: dict[str, deque] = defaultdict(deque)  # route -> queued (status, headers)
        self.reply = lambda body: "🎉 🙂"  # text of a /v1/messages reply
        self.batch_reply = lambda custom_id, params: ("succeeded", "🍕🍺")
        self.batches: dict[str, dict] = {}
        self.polls_before_end = 0
        self.delay_s = 0.0
        self.inflight = 0
        self.max_inflight = 0
        self.keys_seen: set[str] = set()
        self.base_url = ""
        self.results_faults: deque = deque()  # "cut" (body cut off) or "stall" (body stops mid-way)
        self.stall_s = 1.5
        self.create_faults: deque = deque()  # "lost": the batch is created, then the connection drops before the reply

    def count(self, route: str) -> int:
        return sum(1 for r, _ in self.calls if r == route)

    def fail(self, route: str, *answers: tuple[int, dict]) -> None:
        self.failures[route].extend(answers)

    def message(self, text: str, model: str = "claude-test") -> dict:
        return {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [{"type": "text", "text": text}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 5},
        }

    def batch_json(self, batch_id: str) -> dict:
        batch = self.batches[batch_id]
        ended = batch["polls"] > self.polls_before_end
        n = len(batch["requests"])
        ends = Counter(r["result"]["type"] for r in batch["results"]) if ended else Counter()
        return {
            "id": batch_id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": {"processing": 0 if ended else n, **{k: ends[k] for k in ("succeeded", "errored", "canceled", "expired")}},
            "created_at": batch.get("created_at", STAMP),
            "expires_at": STAMP,
            "ended_at": STAMP if ended else None,
            "archived_at": None,
            "cancel_initiated_at": None,
            "results_url": f"{self.base_url}/v1/messages/batches/{batch_id}/results" if ended else None,
        }


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    fake: FakeAnthropic

    def log_message(self, *args):  # keep pytest output clean
        pass

    def _send(self, status: int, payload, headers: dict | None = None, content_type="application/json"):
        body = payload if isinstance(payload, bytes) else json.dumps(payload, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("content-type", content_type)
        self.send_header("content-length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def _route(self) -> str:
        parts = self.path.split("?")[0].strip("/").split("/")
        if self.command == "POST" and parts == ["v1", "messages"]:
            return "messages"
        if self.command == "POST" and parts == ["v1", "messages", "batches"]:
            return "batch_create"
        if self.command == "GET" and parts == ["v1", "messages", "batches"]:
            return "batch_list"
        if self.command == "GET" and len(parts) == 4 and parts[:3] == ["v1", "messages", "batches"]:
            return "batch_get"
        if self.command == "GET" and len(parts) == 5 and parts[4] == "results":
            return "batch_results"
        return "unknown"

    def _handle(self):
        fake = self.fake
        length = int(self.headers.get("content-length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        route = self._route()
        with fake.lock:
            fake.calls.append((route, self.path))
            # SDK 2.x sends the key as a bearer token; older ones as x-api-key.
            fake.keys_seen.add(self.headers.get("x-api-key") or self.headers.get("authorization", "").removeprefix("Bearer "))
            queued = fake.failures[route].popleft() if fake.failures[route] else None
            fake.inflight += 1
            fake.max_inflight = max(fake.max_inflight, fake.inflight)
        try:
            if fake.delay_s:
                time.sleep(fake.delay_s)
            if queued is not None:
                status, headers = queued
                kind = {429: "rate_limit_error", 529: "overloaded_error"}.get(status, "api_error" if status >= 500 else "invalid_request_error")
                return self._send(status, {"type": "error", "error": {"type": kind, "message": f"fake {status}"}}, headers)
            # API version 2026-10-21 rejects sampling parameters, as the real API does.
            bodies = [body] if route == "messages" else [r["params"] for r in body["requests"]] if route == "batch_create" else []
            if any(k in b for b in bodies for k in ("temperature", "top_p", "top_k")):
                return self._send(400, {"type": "error", "error": {"type": "invalid_request_error", "message": "temperature: Extra inputs are not permitted"}})
            if route == "messages":
                with fake.lock:
                    fake.message_bodies.append(body)
                return self._send(200, fake.message(fake.reply(body), body["model"]))
            if route == "batch_create":
                with fake.lock:
                    batch_id = f"msgbatch_{len(fake.batches):04d}"
                    results = []
                    for req in body["requests"]:
                        kind, text = fake.batch_reply(req["custom_id"], req["params"])
                        result = (
                            {"type": "succeeded", "message": fake.message(text, req["params"]["model"])}
                            if kind == "succeeded"
                            else {"type": "errored", "error": {"type": "error", "error": {"type": "api_error", "message": "fake item error"}}}
                            if kind == "errored"
                            else {"type": kind}  # "expired" or "canceled"
                        )
                        results.append({"custom_id": req["custom_id"], "result": result})
                    created_at = datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
                    fake.batches[batch_id] = {"requests": body["requests"], "results": results[::-1], "polls": 0, "created_at": created_at}  # out of order
                    fault = fake.create_faults.popleft() if fake.create_faults else None
                if fault == "lost":  # made server-side; the reply never reaches the client
                    self.close_connection = True
                    return None
                return self._send(200, fake.batch_json(batch_id))
            if route == "batch_list":  # newest first, one page
                with fake.lock:
                    data = [fake.batch_json(b) for b in sorted(fake.batches, reverse=True)]
                first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
                return self._send(200, {"data": data, "has_more": False, "first_id": first, "last_id": last})
            batch_id = self.path.split("?")[0].strip("/").split("/")[3]
            if batch_id not in fake.batches:
                return self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": "no such batch"}})
            if route == "batch_get":
                with fake.lock:
                    fake.batches[batch_id]["polls"] += 1
                return self._send(200, fake.batch_json(batch_id))
            if route == "batch_results":
                lines = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in fake.batches[batch_id]["results"])
                with fake.lock:
                    fault = fake.results_faults.popleft() if fake.results_faults else None
                if fault is not None:  # promise the whole body, send half of it, then stop
                    body = lines.encode()
                    self.send_response(200)
                    self.send_header("content-type", "application/binary")
                    self.send_header("content-length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body[: len(body) // 2])
                    self.wfile.flush()
                    if fault == "stall":
                        time.sleep(fake.stall_s)
                    self.close_connection = True
                    return None
                return self._send(200, lines.encode(), content_type="application/binary")
            return self._send(404, {"type": "error", "error": {"type": "not_found_error", "message": self.path}})
        finally:
            with fake.lock:
                fake.inflight -= 1

    do_GET = _handle
    do_POST = _handle


@pytest.fixture
def fake(monkeypatch):
    state = FakeAnthropic()
    handler = type("BoundHandler", (Handler,), {"fake": state})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_PROFILE", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield state
    server.shutdown()
    server.server_close()


FAST = {"backoff_initial_s": 0.0, "timeout_s": 10.0}


def teacher_for(fake, run_dir, **overrides) -> ClaudeTeacher:
    cfg = ClaudeTeacherConfig(base_url=fake.base_url, poll_interval_s=0.0, **FAST, **overrides)
    return ClaudeTeacher(cfg, BuildContext(seed=0, run_dir=run_dir))


def all_bytes(directory: Path) -> bytes:
    return b"".join(p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file())


MESSAGES = [Message(f"message number {i}", "social") for i in range(6)]


# --- client: retries ---------------------------------------------------------------------


def test_messages_api_retries_429_and_500_then_succeeds(fake, tmp_path):
    fake.fail("messages", (429, {"retry-after": "1.5"}), (500, {}), (529, {}))
    teacher = teacher_for(fake, tmp_path, batch_threshold=100, concurrency=1)
    waits = []
    teacher.backoff.sleep = waits.append
    assert teacher.answer([Message("hello there")]) == ["🎉🙂"]
    assert fake.count("messages") == 4  # three failures, one success
    assert waits[0] == 1.5  # the server's retry-after, honoured exactly
    assert waits[1:] == [0.0, 0.0]  # backoff_initial_s=0 in the fast config
    assert fake.keys_seen == {FAKE_KEY}


def test_backoff_grows_exponentially_with_jitter_and_caps():
    backoff = Backoff(max_retries=10, initial_s=1.0, max_s=8.0)
    for retry, step in enumerate([1, 2, 4, 8, 8, 8]):
        for _ in range(20):
            assert step * 0.5 <= backoff.delay(retry, None) <= step
    assert backoff.delay(0, 30.0) == 30.0
    assert Backoff(retry_after_max_s=5.0).delay(0, 30.0) == 5.0


def test_retries_give_up_with_one_line_error(fake, tmp_path):
    fake.fail("messages", *[(503, {})] * 3)
    teacher = teacher_for(fake, tmp_path, max_retries=2, batch_threshold=100)
    with pytest.raises(RemoteServiceError, match="still failing after 2 retries: HTTP 503"):
        teacher.answer([Message("hello")])
    assert fake.count("messages") == 3


def test_connection_errors_are_retried(fake, tmp_path):
    # A port nothing listens on: every attempt is a connection error.
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    dead = ClaudeJudgeConfig(base_url=f"http://127.0.0.1:{port}", max_retries=2, **FAST)
    judge = ClaudeJudge(dead, BuildContext())
    waits = []
    judge.backoff.sleep = waits.append
    # The judge gives up on this view only (None: the game drops the episode's group).
    assert judge.guess([JudgeView(["🍕"])]) == [None]
    assert len(waits) == 2


def test_client_errors_are_not_retried(fake, tmp_path):
    fake.fail("messages", (401, {}))
    judge = ClaudeJudge(ClaudeJudgeConfig(base_url=fake.base_url, **FAST), BuildContext())
    with pytest.raises(RemoteServiceError, match="HTTP 401"):
        judge.guess([JudgeView(["🍕"])])
    assert fake.count("messages") == 1


# --- teacher -------------------------------------------------------------------------------


def test_teacher_small_job_uses_messages_api_and_drops_invalid_answers(fake, tmp_path):
    replies = {"a cat": "🐱 😺", "one": "🐱", "words": "a cat 🐱🐈", "nine": "🐱" * 9, "ok": "🐶🦴🏠"}
    fake.reply = lambda body: replies[body["messages"][0]["content"]]
    teacher = teacher_for(fake, tmp_path, batch_threshold=100)
    answers = teacher.answer([Message(t) for t in replies])
    assert answers == ["🐱😺", None, None, None, "🐶🦴🏠"]
    assert teacher.stats["valid"] == 2 and teacher.stats["invalid"] == 3
    assert fake.count("messages") == 5 and fake.count("batch_create") == 0
    body = fake.message_bodies[0]
    assert body["system"] == prompts.TEACHER_SYSTEM and body["model"] == "claude-sonnet-4-6"
    # Invalid answers are never written, only that they were dropped.
    written = (tmp_path / ANSWERS_FILE).read_text(encoding="utf-8")
    assert "a cat 🐱🐈" not in written and "🐱" * 9 not in written
    # A second call is answered from the run directory, without a request.
    again = teacher_for(fake, tmp_path, batch_threshold=100).answer([Message("ok"), Message("nine")])
    assert again == ["🐶🦴🏠", None] and fake.count("messages") == 5


def test_teacher_batch_with_errored_items(fake, tmp_path):
    def batch_reply(custom_id, params):
        text = params["messages"][0]["content"]
        if text.endswith(("1", "4")):
            return ("errored", "")
        if text.endswith("2"):
            return ("succeeded", "not emoji at all")
        return ("succeeded", "🍕🍺")

    fake.batch_reply = batch_reply
    fake.polls_before_end = 2
    teacher = teacher_for(fake, tmp_path, batch_threshold=3)
    answers = teacher.answer(MESSAGES)
    assert answers == ["🍕🍺", None, None, "🍕🍺", None, "🍕🍺"]
    assert teacher.stats["valid"] == 3 and teacher.stats["errored"] == 2 and teacher.stats["invalid"] == 1
    assert fake.count("batch_create") == 1 and fake.count("messages") == 0
    batch = fake.batches["msgbatch_0000"]
    assert len({r["custom_id"] for r in batch["requests"]}) == 6
    assert all(emojis.is_emoji_only(a, 2, 8) for a in answers if a is not None)
    recorded = json.loads((tmp_path / BATCHES_FILE).read_text())["batches"]
    assert [b["id"] for b in recorded] == ["msgbatch_0000"] and recorded[0]["status"] == "fetched"


def test_teacher_duplicate_messages_are_asked_once(fake, tmp_path):
    teacher = teacher_for(fake, tmp_path, batch_threshold=2)
    answers = teacher.answer([Message("same"), Message("same"), Message("other")])
    assert answers == ["🍕🍺", "🍕🍺", "🍕🍺"]
    assert len(fake.batches["msgbatch_0000"]["requests"]) == 2


def test_teacher_interrupted_batch_resumes_without_paying_twice(fake, tmp_path):
    fake.polls_before_end = 10**9  # the batch never ends during the first run
    first = teacher_for(fake, tmp_path, batch_threshold=3, max_wait_s=0.0)
    with pytest.raises(RemoteServiceError, match="msgbatch_0000 is still in_progress.*--resume"):
        first.answer(MESSAGES)
    assert fake.count("batch_create") == 1
    assert json.loads((tmp_path / BATCHES_FILE).read_text())["batches"][0]["status"] == "submitted"

    fake.polls_before_end = 0  # it has finished by the time the run is resumed
    second = teacher_for(fake, tmp_path, batch_threshold=3)
    assert second.answer(MESSAGES) == ["🍕🍺"] * 6
    assert fake.count("batch_create") == 1  # the recorded batch was fetched, not paid again
    assert fake.count("batch_results") == 1 and fake.count("messages") == 0
    # A third run finds every answer on file and makes no request at all.
    calls = len(fake.calls)
    assert teacher_for(fake, tmp_path, batch_threshold=3).answer(MESSAGES) == ["🍕🍺"] * 6
    assert len(fake.calls) == calls
    assert FAKE_KEY.encode() not in all_bytes(tmp_path)


def test_teacher_poll_and_fetch_survive_server_errors(fake, tmp_path):
    fake.fail("batch_create", (529, {"retry-after": "0"}))
    fake.fail("batch_get", (500, {}), (429, {"retry-after-ms": "1"}))
    fake.fail("batch_results", (502, {}))
    teacher = teacher_for(fake, tmp_path, batch_threshold=3)
    assert teacher.answer(MESSAGES) == ["🍕🍺"] * 6
    assert fake.count("batch_create") == 2  # one failure (nothing created), one success
    assert len(fake.batches) == 1


def test_teacher_splits_bulk_into_batches_of_max_size(fake, tmp_path):
    teacher = teacher_for(fake, tmp_path, batch_threshold=3, max_batch_size=4)
    assert teacher.answer(MESSAGES) == ["🍕🍺"] * 6
    assert [len(b["requests"]) for b in fake.batches.values()] == [4, 2]
    assert teacher.stats["batches_created"] == 2


# --- prompt source -------------------------------------------------------------------------


def prompt_source(fake, path, **overrides) -> ClaudePromptSource:
    cfg = ClaudePromptsConfig(
        base_url=fake.base_url, categories={"social": "greetings", "question": "factual questions"}, per_request=4, **FAST, **overrides
    )
    return ClaudePromptSource(cfg, BuildContext(seed=1, run_dir=path))


def test_prompt_source_balances_dedups_and_resumes(fake, tmp_path):
    served = defaultdict(int)

    def reply(body):
        request = body["messages"][0]["content"]
        category = "social" if "greetings" in request else "question"
        served[category] += 1
        n = served[category]
        # Numbered, quoted, a preface, and repeats across replies and case: all must be cleaned up.
        lines = ["Here are some messages:", f'1. "{category} message {n}a"', f"2. {category} message {n}b", f"- {category.upper()} MESSAGE {n}A."]
        lines.append(f"{category} message 1a")  # repeated in every reply
        return "\n".join(lines)

    fake.reply = reply
    source = prompt_source(fake, tmp_path)
    got = list(source.messages(6))
    assert [m.category for m in got] == ["social", "question"] * 3  # interleaved and balanced
    texts = [m.text for m in got]
    assert len({prompts.dedup_key(t) for t in texts}) == 6
    assert texts[:2] == ["social message 1a", "question message 1a"]
    rows = [json.loads(line) for line in (tmp_path / "claude_prompts.jsonl").read_text().splitlines()]
    assert len(rows) == 6 and all(r.keys() == {"text", "category"} for r in rows)
    first_requests = fake.count("messages")
    assert first_requests == 4  # two per category (2 new each, then the third)

    # Asking for the same again costs nothing; asking for more asks only for the missing ones.
    assert [m.text for m in prompt_source(fake, tmp_path).messages(6)] == texts
    assert fake.count("messages") == first_requests
    more = list(prompt_source(fake, tmp_path).messages(10))
    assert len(more) == 10 and more[:6] == got  # the first six keep their place
    new_requests = fake.count("messages") - first_requests
    assert new_requests == 2  # one per category, each asking for 2
    assert "Write 2 different messages" in fake.message_bodies[-1]["messages"][0]["content"]
    assert FAKE_KEY.encode() not in all_bytes(tmp_path)


def test_prompt_source_stops_on_a_stalled_category(fake, tmp_path):
    fake.reply = lambda body: "the same message every time"
    got = list(prompt_source(fake, tmp_path, stall_rounds=2).messages(4))
    assert len(got) == 1  # one unique message in total; other requests produce only duplicates
    # "social" gets the one message, then gives up after two rounds without news; "question" after two.
    assert fake.count("messages") == 3 + 2


# --- judge -----------------------------------------------------------------------------------


def test_judge_sends_a_multi_turn_conversation_per_episode(fake):
    fake.reply = lambda body: 'Guess: "I love pizza and beer"\nBecause of the pizza emoji.'
    judge = ClaudeJudge(ClaudeJudgeConfig(base_url=fake.base_url, **FAST), BuildContext())
    views = [JudgeView(["🍕"]), JudgeView(["🍕🍺", "❤️"], ["pizza and beer"]), JudgeView(["🐱", "", "🐶"], ["a cat", ""])]
    assert judge.guess(views) == ["I love pizza and beer"] * 3
    by_turns = sorted(fake.message_bodies, key=lambda b: len(b["messages"]))
    assert [[m["role"] for m in b["messages"]] for b in by_turns] == [
        ["user"],
        ["user", "assistant", "user"],
        ["user", "assistant", "user", "assistant", "user"],
    ]
    two = by_turns[1]["messages"]
    assert "🍕🍺" in two[0]["content"] and two[1]["content"] == "pizza and beer" and "❤️" in two[2]["content"]
    three = by_turns[2]["messages"]
    assert "(no emoji)" in three[2]["content"] and three[3]["content"] == "(no guess)"
    assert all(b["system"] == prompts.JUDGE_SYSTEM and b["model"] == "claude-haiku-4-5" for b in by_turns)


def test_judge_runs_requests_concurrently_up_to_the_limit(fake):
    fake.delay_s = 0.15
    fake.reply = lambda body: body["messages"][0]["content"].split()[1]  # echo the emoji back
    judge = ClaudeJudge(ClaudeJudgeConfig(base_url=fake.base_url, concurrency=3, **FAST), BuildContext())
    emoji = ["🍕", "🐱", "🐶", "🌧️", "🎉", "🚗"]
    assert judge.guess([JudgeView([e]) for e in emoji]) == emoji  # order preserved
    # Concurrent, not one after another: the fake saw three requests in flight at once (counted,
    # not timed, so a busy machine cannot fail it), and never more than the limit.
    assert fake.max_inflight == 3


def test_judge_retries_rate_limits(fake):
    fake.fail("messages", (429, {"retry-after": "0"}), (500, {}))
    judge = ClaudeJudge(ClaudeJudgeConfig(base_url=fake.base_url, **FAST), BuildContext())
    assert judge.guess([JudgeView(["🍕"])]) == ["🎉 🙂"]
    assert fake.count("messages") == 3


# --- the whole recipe -----------------------------------------------------------------------


def test_claude_data_recipe_end_to_end_and_resumed(fake, monkeypatch, tmp_path):
    from emojikit.ui.cli import cli

    counter = iter(range(10**6))

    def reply(body):  # distinct short messages, whatever the category
        k = int(body["messages"][0]["content"].split()[1])
        return "\n".join(f"message {next(counter)} about the weather" for _ in range(k))

    fake.reply = reply
    unlucky = {"message 3 about the weather", "message 7 about the weather"}
    fake.batch_reply = lambda custom_id, params: ("errored", "") if params["messages"][0]["content"] in unlucky else ("succeeded", "🌧️ ☔")
    monkeypatch.chdir(tmp_path)
    args = [
        "run", str(REPO / "recipes" / "claude-data.toml"),
        f"--set=prompts.base_url={fake.base_url}", f"--set=teacher.base_url={fake.base_url}",
        "--set=prompts.backoff_initial_s=0", "--set=teacher.backoff_initial_s=0", "--set=teacher.poll_interval_s=0",
        "--set=teacher.batch_threshold=5", "--set=data.count=36", "--set=data.rl_count=10",
        "--set=data.test_fraction=0", "--set=data.teacher_batch=1000",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    run_dir = tmp_path / "runs" / "claude-data"
    rows = [json.loads(line) for line in (run_dir / "sft_train.jsonl").read_text(encoding="utf-8").splitlines()]
    errored = sum(1 for r in fake.batches["msgbatch_0000"]["results"] if r["result"]["type"] == "errored")
    assert errored > 0 and len(rows) == 36 - errored
    assert all(r["messages"][2]["content"] == "🌧️☔" for r in rows)
    assert fake.count("batch_create") == 1
    assert FAKE_KEY.encode() not in all_bytes(run_dir)

    # Resumed: prompts and answers come from the run directory; only the errored (unbilled)
    # items are asked again, in one small Messages API job.
    calls = len(fake.calls)
    result = CliRunner().invoke(cli, args + ["--resume"])
    assert result.exit_code == 0, result.output
    assert fake.count("batch_create") == 1 and fake.count("messages") == len([c for c in fake.calls[:calls] if c[0] == "messages"]) + errored
    assert FAKE_KEY.encode() not in all_bytes(run_dir)


# --- credentials -----------------------------------------------------------------------------


def test_missing_key_fails_the_recipe_before_any_work(monkeypatch, tmp_path):
    from emojikit.ui.cli import cli

    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    result = CliRunner().invoke(cli, ["run", str(REPO / "recipes" / "claude-data.toml")])
    assert result.exit_code == 2, result.output
    assert "ANTHROPIC_API_KEY" in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "runs").exists()  # failed before the run directory was made


def test_key_from_dotenv_is_used(fake, monkeypatch, tmp_path):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(MissingCredentialError, match="ANTHROPIC_API_KEY"):
        ClaudeJudge(ClaudeJudgeConfig(base_url=fake.base_url), BuildContext())
    (tmp_path / ".env").write_text(f"ANTHROPIC_API_KEY={FAKE_KEY}\n")
    judge = ClaudeJudge(ClaudeJudgeConfig(base_url=fake.base_url, **FAST), BuildContext())
    judge.guess([JudgeView(["🍕"])])
    assert fake.keys_seen == {FAKE_KEY}


def test_base_url_from_environment(fake, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.base_url)
    judge = ClaudeJudge(ClaudeJudgeConfig(**FAST), BuildContext())
    judge.guess([JudgeView(["🍕"])])
    assert fake.count("messages") == 1


# --- reliability, round two (issue 20) ----------------------------------------------------------


@pytest.mark.parametrize("fault", ["cut", "stall"])
def test_results_download_cut_off_or_stalled_mid_body_is_retried(fake, tmp_path, fault, capfd):
    fake.results_faults.append(fault)
    fake.polls_before_end = 1
    teacher = teacher_for(fake, tmp_path, batch_threshold=3)
    if fault == "stall":
        teacher.client = teacher.client.with_options(timeout=0.5)
    assert teacher.answer(MESSAGES) == ["🍕🍺"] * 6
    assert fake.count("batch_create") == 1 and fake.count("batch_results") == 2
    shown = capfd.readouterr().err
    # The user sees the batch, its state and the retry while waiting, not only the log.
    assert "claude teacher: batch msgbatch_0000 in_progress" in shown and "claude teacher: batch msgbatch_0000 ended" in shown
    assert "fetch batch results: " in shown and "retry 1 of 6" in shown


def test_messages_api_records_each_answer_as_it_arrives(fake, tmp_path):
    """Two of six requests fail for good part-way: the four answers that came back are on file,
    and the re-run pays only for the two."""
    fake.fail("messages", (500, {}), (500, {}))
    fake.delay_s = 0.05
    first = teacher_for(fake, tmp_path, batch_threshold=100, concurrency=6, max_retries=0)
    with pytest.raises(RemoteServiceError, match="HTTP 500"):
        first.answer(MESSAGES)
    assert fake.count("messages") == 6
    recorded = (tmp_path / ANSWERS_FILE).read_text(encoding="utf-8").splitlines()
    assert len(recorded) == 4
    again = teacher_for(fake, tmp_path, batch_threshold=100, concurrency=6)
    assert again.answer(MESSAGES) == ["🎉🙂"] * 6
    assert fake.count("messages") == 6 + 2


def test_batch_create_whose_reply_was_lost_is_found_by_listing_not_created_twice(fake, tmp_path, capfd):
    """The server makes the batch, then the connection drops before the reply: before the
    create is retried the teacher lists batches, finds it, records its id, and never creates
    a second one."""
    fake.create_faults.append("lost")
    teacher = teacher_for(fake, tmp_path, batch_threshold=3)
    assert teacher.answer(MESSAGES) == ["🍕🍺"] * 6
    assert fake.count("batch_create") == 1 and len(fake.batches) == 1
    assert fake.count("batch_list") == 1
    recorded = json.loads((tmp_path / BATCHES_FILE).read_text())["batches"]
    assert [(b["id"], b["status"]) for b in recorded] == [("msgbatch_0000", "fetched")]
    assert teacher.stats["batches_found"] == 1 and teacher.stats["batches_created"] == 0
    shown = capfd.readouterr().err
    assert "create message batch: connection error" in shown and "reply lost; found batch msgbatch_0000" in shown


def test_batch_create_lost_then_the_run_stopped_is_found_on_the_rerun(fake, tmp_path):
    """No retry left after the lost reply: the run stops with one line, the create is on file
    as "creating" (with the fingerprint of its requests), and the re-run finds the batch by
    listing instead of paying for it again."""
    fake.create_faults.append("lost")
    first = teacher_for(fake, tmp_path, batch_threshold=3, max_retries=0)
    with pytest.raises(RemoteServiceError, match="create message batch: still failing after 0 retries: connection error"):
        first.answer(MESSAGES)
    (record,) = json.loads((tmp_path / BATCHES_FILE).read_text())["batches"]
    assert record["status"] == "creating" and record["id"] is None and len(record["fingerprint"]) == 32
    assert len(fake.batches) == 1

    second = teacher_for(fake, tmp_path, batch_threshold=3)
    assert second.answer(MESSAGES) == ["🍕🍺"] * 6
    assert fake.count("batch_create") == 1 and len(fake.batches) == 1
    (record,) = json.loads((tmp_path / BATCHES_FILE).read_text())["batches"]
    assert (record["id"], record["status"]) == ("msgbatch_0000", "fetched")


def test_batch_create_that_never_reached_the_server_is_created_on_the_rerun(fake, tmp_path):
    """A "creating" record the listing does not match (the create failed before the server made
    anything) is marked not_created and the requests go in one new batch."""
    fake.fail("batch_create", (500, {}))
    first = teacher_for(fake, tmp_path, batch_threshold=3, max_retries=0)
    with pytest.raises(RemoteServiceError, match="HTTP 500"):
        first.answer(MESSAGES)
    assert len(fake.batches) == 0
    second = teacher_for(fake, tmp_path, batch_threshold=3)
    assert second.answer(MESSAGES) == ["🍕🍺"] * 6
    assert len(fake.batches) == 1 and fake.count("batch_list") == 1
    statuses = [(b["id"], b["status"]) for b in json.loads((tmp_path / BATCHES_FILE).read_text())["batches"]]
    assert statuses == [(None, "not_created"), ("msgbatch_0000", "fetched")]


def test_data_stats_count_invalid_errored_expired_and_canceled_answers_separately(fake, monkeypatch, tmp_path):
    """`emojikit run recipes/claude-data.toml`: of 20 batch items, 3 answers are not emoji, 2
    errored, 1 expired and 1 was canceled; data_stats.json says so, key by key."""
    from emojikit.ui.cli import cli

    counter = iter(range(10**6))
    fake.reply = lambda body: "\n".join(f"message {next(counter)} about the sea" for _ in range(int(body["messages"][0]["content"].split()[1])))
    fates = {0: ("succeeded", "just words"), 1: ("succeeded", "🌊"), 2: ("succeeded", "🌊" * 9), 3: ("errored", ""), 4: ("errored", ""),
             5: ("expired", ""), 6: ("canceled", "")}
    asked = iter(range(10**6))
    fake.batch_reply = lambda custom_id, params: fates.get(next(asked), ("succeeded", "🌊 🐚"))
    monkeypatch.chdir(tmp_path)
    args = [
        "run", str(REPO / "recipes" / "claude-data.toml"),
        f"--set=prompts.base_url={fake.base_url}", f"--set=teacher.base_url={fake.base_url}",
        "--set=prompts.backoff_initial_s=0", "--set=teacher.backoff_initial_s=0", "--set=teacher.poll_interval_s=0",
        "--set=teacher.batch_threshold=5", "--set=data.count=20", "--set=data.rl_count=0",
        "--set=data.test_fraction=0", "--set=data.teacher_batch=1000",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    stats = json.loads((tmp_path / "runs" / "claude-data" / "data_stats.json").read_text())
    assert fake.count("batch_create") == 1 and len(fake.batches["msgbatch_0000"]["requests"]) == 20
    assert stats["dropped_invalid"] == 3
    assert (stats["dropped_errored"], stats["dropped_expired"], stats["dropped_canceled"]) == (2, 1, 1)
    assert stats["dropped_no_answer"] == 4 and stats["sft_train"] == 20 - 3 - 4
