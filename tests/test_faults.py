"""Remote faults and secrets.

Faults: 429 (with retry-after), 500, timeouts and dropped connections, injected by the fake
Anthropic server of test_claude.py (extended here with a per-request script, dropped
connections and hangs) for the Claude judge through the real SDK, and at the tinker SDK's
client boundary (the fake service of test_tinker.py) for the Tinker judge and backend.
A judge call that fails after its retries ends that episode as failed; GRPO drops its group
(`dropped_groups`); `max_failed_steps` steps in a row with every group dropped stop the run
with a checkpoint and a one-line message saying how to resume.

Secrets: fake keys never reach a run directory, the output, the logs or an error message.
Teacher retries on the same faults are tested in test_claude.py (test_messages_api_retries_429_and_500_then_succeeds,
test_teacher_poll_and_fetch_survive_server_errors).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections import deque
from http.server import ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import tinker
from click.testing import CliRunner

from emojikit.ui.cli import cli
from emojikit.api.components import BuildContext, JudgeView
from emojikit.api.errors import RemoteServiceError
from emojikit_claude.judge import ClaudeJudge
from emojikit_claude.settings import ClaudeJudgeConfig
from emojikit_tinker.config import TinkerBackendConfig, TinkerJudgeConfig
from emojikit_tinker.judge import TinkerJudge
from emojikit_tinker.policy import TinkerPolicy
from emojikit.api.policy import SamplingParams
from test_claude import FAKE_KEY, FakeAnthropic, Handler, all_bytes
from test_tinker import FakeService, no_sleep_retrier, service, tokenizer  # noqa: F401 - fixtures

REPO = Path(__file__).resolve().parents[1]
HANG_S = 1.0  # longer than the client timeout below
FAST = {"backoff_initial_s": 0.0, "timeout_s": 0.4}


# --- the fake Anthropic server, with dropped connections and hangs -------------------------------


class ScriptedAnthropic(FakeAnthropic):
    """`script` holds one entry per coming /v1/messages request: None answers normally,
    ("status", code, headers) answers with that error, "drop" closes the connection without
    an answer, "hang" answers only after the client has timed out."""

    def __init__(self):
        super().__init__()
        self.script: deque = deque()

    def next_fault(self, route: str):
        with self.lock:
            return self.script.popleft() if route == "messages" and self.script else None


class ScriptedHandler(Handler):
    def _handle(self):
        fault = self.fake.next_fault(self._route())
        if fault in ("drop", "hang"):
            self.rfile.read(int(self.headers.get("content-length") or 0))
            with self.fake.lock:
                self.fake.calls.append((self._route(), self.path))
            if fault == "hang":
                time.sleep(HANG_S)  # the client has given up by now
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)  # no status line: a dropped connection
            return None
        if isinstance(fault, tuple):
            self.fake.fail("messages", (fault[1], fault[2]))
        return super()._handle()

    do_GET = _handle
    do_POST = _handle


@pytest.fixture
def server(monkeypatch):
    state = ScriptedAnthropic()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), type("Bound", (ScriptedHandler,), {"fake": state}))
    httpd.daemon_threads = True
    state.base_url = f"http://127.0.0.1:{httpd.server_address[1]}"
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    monkeypatch.setenv("ANTHROPIC_API_KEY", FAKE_KEY)
    for var in ("ANTHROPIC_BASE_URL", "ANTHROPIC_AUTH_TOKEN", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NO_PROXY", "127.0.0.1")
    yield state
    httpd.shutdown()
    httpd.server_close()


EVERY_FAULT = [("status", 429, {"retry-after": "0.25"}), ("status", 500, {}), "hang", "drop"]


def claude_judge(server, **overrides) -> tuple[ClaudeJudge, list[float]]:
    judge = ClaudeJudge(ClaudeJudgeConfig(base_url=server.base_url, **{**FAST, **overrides}), BuildContext())
    waits: list[float] = []
    judge.backoff.sleep = waits.append
    return judge, waits


def test_claude_judge_retries_every_fault_kind_then_answers(server):
    server.script.extend(EVERY_FAULT)
    judge, waits = claude_judge(server, max_retries=4)
    assert judge.guess([JudgeView(["🍕"])]) == ["🎉 🙂"]
    assert server.count("messages") == 5  # four faults, then the answer
    assert waits == [0.25, 0.0, 0.0, 0.0]  # the server's retry-after honoured, then our (zero) backoff


@pytest.mark.parametrize("fault", EVERY_FAULT, ids=["429", "500", "timeout", "dropped"])
def test_claude_judge_gives_up_on_that_view_only(server, fault):
    server.script.extend([fault, fault])  # the first view's request and its one retry
    judge, waits = claude_judge(server, max_retries=1, concurrency=1)
    assert judge.guess([JudgeView(["🍕"]), JudgeView(["🐱"])]) == [None, "🎉 🙂"]
    assert server.count("messages") == 3 and len(waits) == 1


def test_claude_judge_still_raises_errors_retrying_cannot_fix(server):
    server.script.append(("status", 400, {}))
    judge, _ = claude_judge(server)
    with pytest.raises(RemoteServiceError, match="HTTP 400"):
        judge.guess([JudgeView(["🍕"]), JudgeView(["🐱"])])


# --- GRPO with a failing Claude judge: dropped groups, then a clean stop -------------------------

GRPO_RECIPE = """
kind = "grpo"
name = "g"
out = "run"
[backend]
use = "local"
[decoder]
use = "none"
[judge]
use = "claude"
base_url = "{base_url}"
max_retries = 0
backoff_initial_s = 0.0
timeout_s = 0.4
[reward]
use = "similarity"
[prompts]
use = "generated"
[game]
max_turns = 1
max_new_tokens = 4
[grpo]
steps = 6
batch_size = 2
group_size = 2
eval_targets = 0
start_from = "base"
target_pool = 8
max_failed_steps = 2
"""


@pytest.fixture
def one_thread():
    # Two cores shared by several processes: torch's thread pool thrashes, one thread is far faster.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_grpo_drops_failed_groups_and_stops_cleanly_after_failed_steps(server, tmp_path, monkeypatch, one_thread):
    monkeypatch.chdir(tmp_path)
    Path("grpo.toml").write_text(GRPO_RECIPE.format(base_url=server.base_url), encoding="utf-8")
    server.reply = lambda body: "pizza tonight"
    # 4 judge requests per step (2 groups x 2 episodes, one turn, no retries):
    # step 1 loses one, step 2 none, steps 3 and 4 all of them.
    server.script.extend(["drop", None, None, None] + [None] * 4 + [("status", 500, {})] * 2 + ["hang", ("status", 429, {"retry-after": "0"})] + ["drop"] * 4)

    result = CliRunner().invoke(cli, ["run", "grpo.toml"])
    assert result.exit_code == 2, result.output
    last = result.output.strip().splitlines()[-1]
    assert last.startswith("emojikit: error: the judge failed on every group for 2 steps in a row (steps 3-4)")
    assert "checkpoint saved" in last and "emojikit run grpo.toml --resume" in last and "Traceback" not in result.output
    metrics = [json.loads(line) for line in Path("run/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics] == [1, 2, 3, 4]
    assert [r["dropped_groups"] for r in metrics] == [1, 0, 2, 2]
    assert [r.get("failed_step", False) for r in metrics] == [False, False, True, True]
    assert metrics[0]["datums"] <= 2 and metrics[2]["datums"] == metrics[3]["datums"] == 0  # dropped groups never train
    assert Path("run/checkpoints/step_4/adapter_model.safetensors").exists()

    # The service is back: --resume continues after the checkpoint, with no step twice.
    result = CliRunner().invoke(cli, ["run", "grpo.toml", "--resume"])
    assert result.exit_code == 0, result.output
    metrics = [json.loads(line) for line in Path("run/metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in metrics] == [1, 2, 3, 4, 5, 6]
    assert all(r["dropped_groups"] == 0 for r in metrics[4:])
    assert FAKE_KEY.encode() not in all_bytes(Path("run")) and FAKE_KEY not in result.output


# --- Tinker: faults at the SDK's client boundary -----------------------------------------------


def _request() -> httpx.Request:
    return httpx.Request("POST", "http://127.0.0.1/fake")


def tinker_fault(kind: str) -> Exception:
    if kind == "timeout":
        return tinker.APITimeoutError(request=_request())
    if kind == "dropped":
        return tinker.APIConnectionError(request=_request(), message="Server disconnected without sending a response.")
    status, cls, headers = {"429": (429, tinker.RateLimitError, {"retry-after": "2.5"}), "500": (500, tinker.InternalServerError, {}), "401": (401, tinker.AuthenticationError, {})}[kind]
    return cls(f"fake {status}", response=httpx.Response(status, headers=headers, request=_request()), body=None)


def script_faults(service, op: str, *kinds: str) -> None:
    """The next requests of `op` fail with these faults, in order (then succeed)."""
    faults = service.__dict__.setdefault("faults", {}).setdefault(op, deque())
    faults.extend(tinker_fault(k) for k in kinds)
    if not getattr(service, "_scripted", False):
        plain = service.future

        def future(op_name, compute):
            queue = service.faults.get(op_name)
            if queue:
                error = queue.popleft()

                def raise_it():
                    raise error

                return plain(op_name, raise_it)
            return plain(op_name, compute)

        service.future = future
        service._scripted = True


TINKER_FAULTS = ["429", "500", "timeout", "dropped"]


def test_tinker_judge_retries_every_fault_kind_honouring_retry_after(service):
    retrier = no_sleep_retrier(max_attempts=5, backoff_seconds=1.0, jitter=0.5)
    judge = TinkerJudge(TinkerJudgeConfig(concurrency=1, max_tokens=4), retrier=retrier)
    script_faults(service, "sample", *TINKER_FAULTS)
    (guess,) = judge.guess([JudgeView(["🍕"])])
    assert isinstance(guess, str) and retrier.retries == 4
    assert retrier.delays[0] == 2.5  # retry-after
    assert 1.0 <= retrier.delays[1] <= 2.0 and 2.0 <= retrier.delays[2] <= 4.0 and 4.0 <= retrier.delays[3] <= 8.0  # doubling, minus jitter


@pytest.mark.parametrize("kind", TINKER_FAULTS)
def test_tinker_judge_gives_up_on_that_view_only(service, kind):
    retrier = no_sleep_retrier(max_attempts=2)
    judge = TinkerJudge(TinkerJudgeConfig(concurrency=1, max_tokens=4), retrier=retrier)
    script_faults(service, "sample", kind, kind)
    guesses = judge.guess([JudgeView(["🍕"]), JudgeView(["🐱"])])
    assert guesses[0] is None and isinstance(guesses[1], str)
    assert retrier.gave_up == 1


def test_tinker_judge_still_raises_errors_retrying_cannot_fix(service, monkeypatch):
    judge = TinkerJudge(TinkerJudgeConfig(max_tokens=4), retrier=no_sleep_retrier())
    script_faults(service, "sample", "401")
    with pytest.raises(RemoteServiceError, match="AuthenticationError"):
        judge.guess([JudgeView(["🍕"])])


def test_tinker_backend_sampling_retries_every_fault_kind(service):
    retrier = no_sleep_retrier(max_attempts=5)
    policy = TinkerPolicy(TinkerBackendConfig(), retrier=retrier)
    policy.encode_prompt([{"role": "user", "content": "hi"}])  # start the clients
    script_faults(service, "sample", *TINKER_FAULTS)
    (group,) = policy.sample([[{"role": "user", "content": "I got the job!"}]], 1, SamplingParams(max_tokens=3, seed=1))
    assert len(group) == 1 and retrier.retries == 4 and retrier.delays[0] == 2.5


# --- secrets -----------------------------------------------------------------------------------


def test_claude_data_run_keeps_the_key_out_of_run_dir_output_and_logs(server, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.DEBUG)  # everything the SDK, httpx and emojikit log
    server.script.extend([("status", 429, {"retry-after": "0"}), "drop"])
    args = [
        "run", str(REPO / "recipes" / "claude-data.toml"), "--set=out=run",
        f"--set=prompts.base_url={server.base_url}", f"--set=teacher.base_url={server.base_url}",
        "--set=prompts.backoff_initial_s=0", "--set=teacher.backoff_initial_s=0", "--set=teacher.poll_interval_s=0",
        "--set=data.count=12", "--set=data.rl_count=4", "--set=data.test_fraction=0",
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert (tmp_path / "run" / "sft_train.jsonl").exists() and server.keys_seen == {FAKE_KEY}
    assert FAKE_KEY.encode() not in all_bytes(tmp_path / "run")
    assert FAKE_KEY not in result.output and FAKE_KEY not in caplog.text


def test_an_error_echoing_the_key_is_scrubbed(server, tmp_path, monkeypatch, caplog):
    """A server that repeats the key in its error (some proxies do) never gets it printed."""
    monkeypatch.chdir(tmp_path)
    caplog.set_level(logging.DEBUG)
    plain_send = ScriptedHandler._send

    def send(self, status, payload, headers=None, content_type="application/json"):
        if status == 401:
            payload = {"type": "error", "error": {"type": "authentication_error", "message": f"invalid x-api-key {FAKE_KEY}"}}
        return plain_send(self, status, payload, headers, content_type)

    monkeypatch.setattr(ScriptedHandler, "_send", send)
    server.script.append(("status", 401, {}))
    args = ["run", str(REPO / "recipes" / "claude-data.toml"), "--set=out=run", f"--set=prompts.base_url={server.base_url}", "--set=data.count=4"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1].startswith("emojikit: error: ")
    assert "HTTP 401 authentication_error: invalid x-api-key <ANTHROPIC_API_KEY>" in result.output
    assert FAKE_KEY not in result.output and FAKE_KEY not in caplog.text
    assert FAKE_KEY.encode() not in all_bytes(tmp_path / "run")


def test_tinker_error_echoing_the_key_is_scrubbed(service, monkeypatch):
    monkeypatch.setenv("TINKER_API_KEY", "tk-secret-0123456789")
    judge = TinkerJudge(TinkerJudgeConfig(max_tokens=4), retrier=no_sleep_retrier())
    script_faults(service, "sample")
    service.faults["sample"].append(tinker.AuthenticationError("bad key tk-secret-0123456789", response=httpx.Response(401, request=_request()), body=None))
    with pytest.raises(RemoteServiceError) as caught:
        judge.guess([JudgeView(["🍕"])])
    assert "tk-secret-0123456789" not in str(caught.value) and "<TINKER_API_KEY>" in str(caught.value)
