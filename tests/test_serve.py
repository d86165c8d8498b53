"""`emojikit serve`: the API through an HTTP client (small fakes for the sender, judge and reward,
the real emoji-mask decoder as the format check), the human-game log, the Runs mode, the CLI,
and a real headless browser (Debian's chromium) through one Guess and one Send game with the
bundled model."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from starlette.testclient import TestClient

from emojikit.api import emojis
from emojikit.ui.cli import cli
from emojikit.api.components import Message
from emojikit.play.game import GameSettings
from emojikit.evaluation.human_games import HumanGameLog, markdown, read_games, summarize
from emojikit.api.policy import Sample
from emojikit.ui.web.app import MAX_BODY, create_app, is_loopback
from emojikit.ui.web.games import GameService
from emojikit.ui.web.models import Checkpoint, Models, checkpoint_ids
from emojikit.ui.web.worker import ModelWorker

REPO = Path(__file__).resolve().parents[1]
TARGET = "Let's get pizza tonight"
SCRIPT = "<script>window.pwned = 1</script><b>bold</b>"


# --- small fakes: a sender with scripted emoji, a judge by emoji, a word-overlap reward ----------


class FakePolicy:
    def __init__(self, answers=("🍕🌙", "🍕🍽️🌃")):
        self.answers, self.calls = answers, []

    def sample(self, prompts, n, params, decoder=None):
        self.calls.append(prompts)
        # turn k (the number of assistant turns so far) gets answers[k]
        return [[Sample([], [], [], self.answers[min(sum(m["role"] == "assistant" for m in p), len(self.answers) - 1)])] for p in prompts]


class FakeJudge:
    def __init__(self):
        self.pool: list[str] = []

    def add_candidates(self, texts):
        self.pool += [t for t in texts if t not in self.pool]

    def guess(self, views):
        # a miss on the first turn, the newest candidate from the second on
        return ["The weather is nice" if len(v.emoji_turns) == 1 else self.pool[-1] for v in views]


class FakeReward:
    success_threshold = 0.8

    def similarity(self, targets, guesses):
        def overlap(a, b):
            a, b = set(a.casefold().split()), set(b.casefold().split())
            return len(a & b) / max(len(a | b), 1)

        return [overlap(t, g) for t, g in zip(targets, guesses)]


def decoder():
    from emojikit_emoji_mask.decoder import EmojiMaskDecoder

    return EmojiMaskDecoder(2, 8)


def fake_models(policy=None, max_turns=3) -> Models:
    policy = policy or FakePolicy()
    return Models(
        game=GameSettings(max_turns=max_turns), decoder=decoder(), reward=FakeReward(),
        heldout=[Message("My cat is tired", "scene")],
        senders={"base": lambda: policy}, judges={"fake": FakeJudge},
        checkpoints=[Checkpoint("base", "base")],
    )


@pytest.fixture()
def served(tmp_path):
    """(client, service, policy) around the fake models; the worker runs for the client's life."""
    policy = FakePolicy()
    models = fake_models(policy)
    service = GameService(models, ModelWorker(models.run), HumanGameLog(tmp_path / "serve" / "human_games.jsonl"))
    with TestClient(create_app(service, runs_root=tmp_path / "runs")) as client:
        yield client, service, policy


def settle(client, game, timeout=30.0):
    """Poll like the page does until the model has answered."""
    deadline = time.monotonic() + timeout
    while game["status"] == "thinking":
        assert time.monotonic() < deadline, game
        time.sleep(0.02)
        game = client.get(f"/api/games/{game['id']}").json()
    return game


# --- the three game modes over HTTP ------------------------------------------------------------


def test_guess_game_hides_the_target_scores_guesses_and_logs_the_game(served, tmp_path):
    client, service, policy = served
    game = client.post("/api/games", json={"mode": "guess", "checkpoint": "base", "message": TARGET}).json()
    assert game["status"] == "thinking" and game["target"] is None
    game = settle(client, game)
    assert game["status"] == "your_turn" and game["target"] is None  # still hidden
    assert [t["emoji"] for t in game["turns"]] == ["🍕🌙"] and game["turns"][0]["guess"] is None
    assert TARGET not in json.dumps(game)

    game = settle(client, client.post(f"/api/games/{game['id']}/guess", json={"guess": "pizza at night"}).json())
    assert game["turns"][0]["guess"] == "pizza at night" and game["turns"][0]["similarity"] == pytest.approx(1 / 6, abs=1e-3)
    assert game["status"] == "your_turn" and len(game["turns"]) == 2 and game["target"] is None
    # after a miss the sender sees the person's guess, as in the game
    assert "pizza at night" in policy.calls[-1][0][-1]["content"]

    game = settle(client, client.post(f"/api/games/{game['id']}/guess", json={"guess": TARGET.upper()}).json())
    assert game["status"] == "finished" and game["success"] and game["target"] == TARGET and game["best_similarity"] == 1.0
    late = client.post(f"/api/games/{game['id']}/guess", json={"guess": "again"})
    assert late.status_code == 400 and "over" in late.json()["error"]

    (row,) = read_games(tmp_path / "serve" / "human_games.jsonl")
    assert row["mode"] == "guess" and row["checkpoint"] == "base" and row["target"] == TARGET and row["success"] is True
    assert [t["guess"] for t in row["turns"]] == ["pizza at night", " ".join(TARGET.upper().split())]
    assert row["n_turns"] == 2 and row["similarity"] == 1.0 and row["time"] and row["success_threshold"] == 0.8


def test_send_game_checks_emoji_inline_and_the_judge_guesses(served, tmp_path):
    client, service, _ = served
    game = client.post("/api/games", json={"mode": "send", "judge": "fake", "message": TARGET}).json()
    assert game["status"] == "your_turn" and game["target"] == TARGET
    url = f"/api/games/{game['id']}/emoji"
    for bad, says in [
        ("hello", "Only emoji"), ("🍕 and 🌙", "Only emoji"), ("🍕", "Send 2-8 emoji (you sent 1)"),
        ("🍕" * 9, "you sent 9"), ("", "Type or pick 2-8 emoji"), ("🍕" * 200, "too long"), (["🍕"], "Type or pick"),
    ]:
        answer = client.post(url, json={"emoji": bad})
        assert answer.status_code == 400 and says in answer.json()["error"], (bad, answer.json())
    assert client.get(f"/api/games/{game['id']}").json()["status"] == "your_turn"  # bad input never ends a turn

    game = settle(client, client.post(url, json={"emoji": "🍕 ❤"}).json())  # spaces and an unqualified heart are fine
    assert game["turns"][0]["emoji"] == "🍕❤️" and game["turns"][0]["guess"] == "The weather is nice"
    assert game["status"] == "your_turn"
    game = settle(client, client.post(url, json={"emoji": "🍕🌃"}).json())
    assert game["status"] == "finished" and game["success"] and game["turns"][1]["guess"] == TARGET

    (row,) = read_games(tmp_path / "serve" / "human_games.jsonl")
    assert row["mode"] == "send" and row["judge"] == "fake" and row["checkpoint"] is None
    assert [t["emoji"] for t in row["turns"]] == ["🍕❤️", "🍕🌃"]


def test_watch_game_plays_sender_against_judge_and_is_not_logged(served, tmp_path):
    client, _, _ = served
    game = settle(client, client.post("/api/games", json={"mode": "watch", "message": TARGET}).json())
    assert game["status"] == "finished" and game["success"] and len(game["turns"]) == 2
    assert game["checkpoint"] == "base" and game["judge"] == "fake"
    assert not (tmp_path / "serve" / "human_games.jsonl").exists()
    # without a message the target is a held-out one
    held = settle(client, client.post("/api/games", json={"mode": "watch"}).json())
    assert held["target"] == "My cat is tired"


def test_text_is_never_html(served):
    """Messages and guesses come back verbatim as JSON; the page renders them with textContent
    under a CSP that allows only its own scripts (the browser test checks the page itself)."""
    client, _, _ = served
    game = settle(client, client.post("/api/games", json={"mode": "send", "message": SCRIPT}).json())
    assert game["target"] == SCRIPT
    answer = client.get(f"/api/games/{game['id']}")
    assert answer.headers["content-type"] == "application/json"
    assert answer.headers["x-content-type-options"] == "nosniff"
    page = client.get("/")
    csp = page.headers["content-security-policy"]
    assert "script-src 'self'" in csp and "default-src 'self'" in csp and "unsafe-inline" not in csp
    script = client.get("/static/app.js").text
    assert "innerHTML" not in script and "outerHTML" not in script and "insertAdjacentHTML" not in script
    for asset in ("/", "/static/app.js", "/static/style.css"):
        text = client.get(asset).text
        assert "https://" not in text and "//cdn" not in text  # every asset is local
    assert client.get("/static/../games.py").status_code == 404


def test_input_caps_and_ids_only(served):
    client, _, _ = served
    huge = client.post("/api/games", content=b"{" + b" " * (MAX_BODY + 1) + b"}", headers={"content-type": "application/json"})
    assert huge.status_code == 413
    long_message = client.post("/api/games", json={"mode": "guess", "message": "a" * 301})
    assert long_message.status_code == 400 and "too long" in long_message.json()["error"]
    for bad in [{"mode": "guess", "checkpoint": "../runs/sft/checkpoints/step_1"}, {"mode": "guess", "checkpoint": "/tmp"}]:
        assert client.post("/api/games", json=bad).json()["error"] == "unknown checkpoint: pick one from the list"
    assert client.post("/api/games", json={"mode": "send", "judge": "claude"}).status_code == 400
    assert client.post("/api/games", json={"mode": "shell"}).status_code == 400
    assert client.post("/api/games", content=b"not json").status_code == 400
    assert client.get("/api/games/nope").status_code == 404
    game = client.post("/api/games", json={"mode": "guess"}).json()
    assert client.post(f"/api/games/{game['id']}/emoji", json={"emoji": "🍕🍕"}).status_code == 404  # wrong mode
    config = client.get("/api/config").json()
    assert config["checkpoints"] == [{"id": "base", "label": "base"}] and config["judges"] == ["fake"]
    assert (config["min_emoji"], config["max_emoji"]) == (2, 8)


def test_emoji_picker_searches_names():
    from emojikit.ui.web.app import PALETTE, picker

    assert all(emojis.info(e) is not None for e in PALETTE)
    found = [item["emoji"] for item in picker("pizza")]
    assert found[0] == "🍕"
    assert picker("<script>") == [] and len(picker("")) == len(PALETTE)


def test_checkpoint_ids_are_short_and_unique():
    ids = [c.id for c in checkpoint_ids(["base", "runs/sft/checkpoints/step_250", "runs/grpo/checkpoints/step_20", "other/sft/checkpoints/step_250"])]
    assert ids == ["base", "sft-step_250", "grpo-step_20", "sft-step_250-2"]


def test_a_run_directory_is_named_by_its_run(tmp_path):
    (tmp_path / "runs" / "smoke" / "checkpoints").mkdir(parents=True)
    assert [c.id for c in checkpoint_ids([str(tmp_path / "runs" / "smoke"), "base"])] == ["smoke", "base"]


# --- the worker: off the request path, batched ---------------------------------------------------


def test_worker_batches_waiting_jobs_of_a_kind_into_one_call():
    calls, gate = [], threading.Event()

    def run(kind, key, payloads):
        if kind == "block":
            gate.wait(10)
        calls.append((kind, key, list(payloads)))
        return [p * 10 for p in payloads]

    worker = ModelWorker(run)
    worker.start()
    results, errors = [], []
    blocker = worker.submit("block", None, 0, results.append, errors.append)
    time.sleep(0.05)
    jobs = [worker.submit("sender", "base", i, results.append, errors.append) for i in range(1, 6)]
    other = worker.submit("sender", "sft", 7, results.append, errors.append)
    assert worker.ahead_of(jobs[-1]) == 5 and worker.pending() == 7  # the page shows this while it waits
    gate.set()
    for job in [blocker, *jobs, other]:
        assert job.done.wait(10)
    worker.stop()
    assert ("sender", "base", [1, 2, 3, 4, 5]) in calls and ("sender", "sft", [7]) in calls
    assert sorted(results) == [0, 10, 20, 30, 40, 50, 70] and not errors and worker.pending() == 0


def test_a_model_fault_ends_the_game_with_a_message(tmp_path):
    class Broken(FakePolicy):
        def sample(self, prompts, n, params, decoder=None):
            raise RuntimeError("out of memory")

    models = fake_models(Broken())
    service = GameService(models, ModelWorker(models.run), None)
    with TestClient(create_app(service)) as client:
        game = settle(client, client.post("/api/games", json={"mode": "guess"}).json())
        assert game["status"] == "error" and "out of memory" in game["error"]
        assert client.get("/api/config").status_code == 200  # the server goes on


# --- the human-game log --------------------------------------------------------------------------


def test_log_tolerates_and_cuts_a_torn_last_line(tmp_path):
    path = tmp_path / "human_games.jsonl"
    rows = [{"mode": "guess", "checkpoint": "base", "turns": [], "success": True, "similarity": 0.9, "n_turns": 1},
            {"mode": "send", "judge": "retrieval", "turns": [], "success": False, "similarity": 0.4, "n_turns": 3}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"mode": "guess", "checkpo')  # killed mid-write
    assert read_games(path) == rows  # a reader skips the torn line
    log = HumanGameLog(path)  # a restarted server cuts it before appending
    assert log.dropped_bytes == len('{"mode": "guess", "checkpo')
    log.append({**rows[0], "success": False, "similarity": 0.5})
    assert len(read_games(path)) == 3 and path.read_text().endswith("}\n")
    summary = summarize(read_games(path))
    assert summary["human_judge"]["base"] == {"games": 2, "success_rate": 0.5, "similarity": pytest.approx(0.7), "mean_turns": 1.0}
    assert summary["human_sender"]["retrieval"]["games"] == 1

    path.write_text(json.dumps(rows[0]) + "\n{broken\n" + json.dumps(rows[1]) + "\n")
    with pytest.raises(Exception, match=r"human_games.jsonl:2: not valid JSON"):
        read_games(path)


def test_human_figures_sit_next_to_the_model_judges(tmp_path):
    games = [{"mode": "guess", "checkpoint": "base", "turns": [{}], "success": True, "similarity": 1.0, "n_turns": 1},
             {"mode": "guess", "checkpoint": "base", "turns": [{}, {}], "success": False, "similarity": 0.5, "n_turns": 2}]
    results = {"judge": "retrieval", "checkpoints": {"base": {"masked": {"success_rate": 0.25, "similarity": 0.6}}, "runs/x": {"masked": {"success_rate": 0.5, "similarity": 0.7}}}}
    table = markdown(summarize(games), results)
    assert "| base | 2 | 0.500 | 0.750 | 1.50 | 0.250 | 0.600 |" in table
    assert "| runs/x | 0 | - | - | - | 0.500 | 0.700 |" in table and "`retrieval` judge" in table


def test_eval_human_games_reports_next_to_the_model_judge(tmp_path, monkeypatch):
    """The CLI wiring: the checkpoints people played are evaluated, and the human table lands
    beside eval.json (the model game itself is stubbed: test_interactive plays it for real)."""
    import emojikit.evaluation.evaluate

    played = []

    def fake_eval(recipe, run_dir):
        played.append(recipe.settings["eval"].checkpoints)
        results = {"judge": "retrieval", "checkpoints": {c: {"masked": {"success_rate": 0.5, "similarity": 0.6}} for c in recipe.settings["eval"].checkpoints}}
        (run_dir.path / "eval.json").write_text(json.dumps(results))

    monkeypatch.setattr(emojikit.evaluation.evaluate, "run", fake_eval)
    games = tmp_path / "human_games.jsonl"
    games.write_text(json.dumps({"mode": "guess", "checkpoint": "base", "turns": [{}], "success": True, "similarity": 0.9, "n_turns": 1}) + "\n" + '{"mode": "gu')
    result = CliRunner().invoke(cli, ["eval", "--recipe", str(REPO / "recipes/eval.toml"), "--human-games", str(games), "--out", str(tmp_path / "eval")])
    assert result.exit_code == 0, result.output
    assert played == [["base"]]
    row = "| base | 1 | 1.000 | 0.900 | 1.00 | 0.500 | 0.600 |"
    assert row in result.stdout and row in (tmp_path / "eval" / "human_games.md").read_text()
    assert json.loads((tmp_path / "eval" / "human_games.json").read_text())["human_judge"]["base"]["games"] == 1


def test_eval_human_games_errors_are_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["eval", "--human-games", str(tmp_path / "missing.jsonl")])
    assert result.exit_code == 2 and "missing.jsonl: file not found" in result.stderr
    (tmp_path / "bad.jsonl").write_text('{"mode": "chess", "turns": []}\n')
    result = CliRunner().invoke(cli, ["eval", "--human-games", str(tmp_path / "bad.jsonl")])
    assert result.exit_code == 2 and "not a human game" in result.stderr


# --- the Runs mode -------------------------------------------------------------------------------


def make_run(root: Path) -> Path:
    run = root / "grpo"
    run.mkdir(parents=True)
    (run / "recipe.toml").write_text('kind = "grpo"\nname = "grpo"\n')
    (run / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "reward_mean": 0.1 * s, "similarity": 0.5 + 0.01 * s}) + "\n" for s in (1, 2, 3)))
    (run / "eval.jsonl").write_text(json.dumps({"step": 0, "targets": 2, "success_rate": 0.0, "similarity": 0.4, "mean_turns": 2.0, "format_violations": 0.0}) + "\n")
    episodes = [{"step": s, "target": t, "success": r > 0.5, "reward": {"total": r}, "turns": [{"emoji": "🍕🌙", "valid": True, "guess": SCRIPT, "similarity": r}]}
                for s, t, r in [(1, "Let's get pizza", 0.2), (2, "My cat is tired", 0.9), (3, "Happy birthday", -0.1)]]
    (run / "episodes.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes) + '{"step": 4, "tar')
    (root / "notes").mkdir()  # not a run
    return run


def test_runs_api_shows_curves_and_episodes_by_name_only(served, tmp_path):
    client, _, _ = served
    make_run(tmp_path / "runs")
    assert client.get("/api/runs").json()["runs"] == [{"id": "grpo", "kind": "grpo", "episodes": True}]
    metrics = client.get("/api/runs/grpo/metrics").json()
    curves = {c["key"]: c for c in metrics["curves"]}
    assert curves["reward_mean"]["training"] == [[1, 0.1], [2, 0.2], [3, pytest.approx(0.3)]]
    assert curves["similarity"]["heldout"] == [[0, 0.4]] and metrics["evals"][0]["targets"] == 2
    best = client.get("/api/runs/grpo/episodes", params={"order": "best", "limit": 2}).json()
    assert best["total"] == 3 and [e["target"] for e in best["episodes"]] == ["My cat is tired", "Let's get pizza"]
    assert best["episodes"][0]["turns"][0]["guess"] == SCRIPT
    step = client.get("/api/runs/grpo/episodes", params={"step": 3, "target": "BIRTH"}).json()
    assert [e["target"] for e in step["episodes"]] == ["Happy birthday"]
    for bad in ("notes", "..", "%2e%2e", "missing"):
        assert client.get(f"/api/runs/{bad}/metrics").status_code == 404
    assert client.get("/api/runs/grpo/episodes", params={"order": "rm -rf"}).status_code == 400


# --- the CLI -------------------------------------------------------------------------------------


def test_serve_binds_loopback_unless_told_and_warns(monkeypatch, tmp_path):
    import uvicorn

    import emojikit.ui.web.models as web_models

    ran = []
    monkeypatch.setattr(uvicorn, "run", lambda app, host, port, **kw: ran.append((host, port)))
    monkeypatch.setattr(web_models, "build_models", lambda *a, **k: fake_models())
    runner = CliRunner()
    local = runner.invoke(cli, ["serve", "--dir", str(tmp_path / "serve"), "--port", "8123"])
    assert local.exit_code == 0, local.output
    assert ran[-1] == ("127.0.0.1", 8123) and "warning" not in local.stderr and "http://127.0.0.1:8123/" in local.stdout
    wide = runner.invoke(cli, ["serve", "--host", "0.0.0.0", "--dir", str(tmp_path / "serve")])
    assert ran[-1] == ("0.0.0.0", 8000) and "emojikit: warning: serving on 0.0.0.0" in wide.stderr
    assert is_loopback("::1") and is_loopback("localhost") and not is_loopback("192.168.1.5")


def test_serve_rejects_a_missing_checkpoint_in_one_line(tmp_path):
    result = CliRunner().invoke(cli, ["serve", "--recipe", str(REPO / "recipes/grpo.toml"), "--checkpoint", str(tmp_path / "nope")])
    assert result.exit_code == 2 and len(result.stderr.strip().splitlines()) == 1 and "not a checkpoint directory" in result.stderr


# --- the bundled model, over HTTP and in a real browser --------------------------------------------


# The sender of the real-model tests and the screenshots: the bundled base model, or a trained one for the README
# (EMOJIKIT_SCREENSHOT_CHECKPOINT=runs/sft/checkpoints/step_250).
SCREENSHOT_SENDER = os.environ.get("EMOJIKIT_SCREENSHOT_CHECKPOINT", "base")


@pytest.fixture(scope="module")
def real_service(tmp_path_factory):
    """The real components of recipes/grpo.toml: bundled SmolLM2 under the emoji mask, the
    retrieval judge, the MiniLM reward (one torch thread: the machine is shared)."""
    import torch

    from emojikit.ui.web.models import build_models

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    models = build_models(REPO / "recipes/grpo.toml", [SCREENSHOT_SENDER], [], temperature=0.7)
    log = HumanGameLog(tmp_path_factory.mktemp("serve") / "human_games.jsonl")
    service = GameService(models, ModelWorker(models.run), log)
    yield service
    torch.set_num_threads(before)


def test_a_guess_game_with_the_bundled_model(real_service):
    with TestClient(create_app(real_service, start_worker=False)) as client:
        real_service.worker.start()
        game = settle(client, client.post("/api/games", json={"mode": "guess", "message": TARGET}).json(), timeout=300)
        assert game["status"] == "your_turn", game
        emoji = game["turns"][0]["emoji"]
        assert emojis.is_emoji_only(emoji, 2, 8) and game["turns"][0]["valid"], emoji
        game = settle(client, client.post(f"/api/games/{game['id']}/guess", json={"guess": TARGET}).json(), timeout=300)
        assert game["status"] == "finished" and game["success"] and game["turns"][0]["similarity"] == pytest.approx(1.0, abs=1e-4)


CHROMIUM, CHROMEDRIVER = shutil.which("chromium"), shutil.which("chromedriver")
# The README's screenshots: refreshed only when asked (EMOJIKIT_SCREENSHOTS=1 bin/test tests/test_serve.py),
# so a plain test run leaves the tracked PNGs alone.
IMAGES = REPO / "docs" / "img" if os.environ.get("EMOJIKIT_SCREENSHOTS") else Path(tempfile.mkdtemp(prefix="emojikit-screens-"))
# For the README the Guess screenshot shows a person's wrong guess; every other run guesses HTML and checks it renders as text.
WRONG_GUESS = "Let's order sushi tonight" if os.environ.get("EMOJIKIT_SCREENSHOTS") else SCRIPT


@pytest.fixture(scope="module")
def live_url(real_service, tmp_path_factory):
    """The app under uvicorn on a free loopback port, in a thread (the Runs mode on a synthetic run)."""
    import uvicorn

    runs_root = tmp_path_factory.mktemp("runs")
    make_run(runs_root)

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(real_service, runs_root=runs_root), host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(30)


@pytest.fixture()
def browser(tmp_path):
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("Debian's chromium and chromium-driver are not installed (apt-get install -y chromium chromium-driver; .ci/run does)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # selenium-manager must never fetch a driver or browser
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1000,900",
                 f"--user-data-dir={tmp_path / 'chromium-profile'}"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def wait_for(driver, condition, timeout=300.0, what="the page"):
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = condition()
        except Exception:  # an element between renders
            value = None
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def test_browser_plays_a_guess_game_and_a_send_game(real_service, live_url, browser):
    from selenium.webdriver.common.by import By

    find = lambda css: browser.find_element(By.CSS_SELECTOR, css)  # noqa: E731
    browser.get(live_url + "/")
    wait_for(browser, lambda: find("body").get_attribute("data-ready") == "1", 60, "the page to load")

    # Guess: a second person types the message; a wrong guess holding HTML, then the right one.
    find("#guess-message").send_keys(TARGET)
    find("#guess-new").click()
    wait_for(browser, lambda: find("#guess-input").is_enabled() and len(browser.find_elements(By.CSS_SELECTOR, "#guess-turns .turn")) == 1, what="the model's first emoji")
    first = find("#guess-turns .emoji").text
    assert emojis.is_emoji_only(first, 2, 8), first
    assert TARGET not in find("#mode-guess").text  # hidden until the end
    browser.execute_script("document.getElementById('guess-input').value = arguments[0]", WRONG_GUESS)
    find("#guess-submit").click()
    wait_for(browser, lambda: find("#guess-input").is_enabled() and len(browser.find_elements(By.CSS_SELECTOR, "#guess-turns .turn")) == 2, what="the model's second turn")
    assert find("#guess-turns .guess-text").text == WRONG_GUESS  # shown as text
    assert browser.execute_script("return window.pwned === undefined") and not browser.find_elements(By.CSS_SELECTOR, "#guess-turns b")
    find("#guess-input").send_keys(TARGET)
    find("#guess-submit").click()
    wait_for(browser, lambda: find("#guess-result").text, what="the result")
    assert "Success on turn 2" in find("#guess-result").text and find("#guess-answer").text == TARGET
    assert find("#guess-form").get_attribute("hidden") is not None
    IMAGES.mkdir(parents=True, exist_ok=True)
    browser.save_screenshot(str(IMAGES / "serve-guess.png"))

    # Send: bad input gets an inline message, then emoji from the picker and the keyboard.
    find("#tab-send").click()
    find("#send-message").send_keys(TARGET)
    find("#send-new").click()
    wait_for(browser, lambda: find("#send-target").text == TARGET and find("#send-input").is_enabled(), 30, "the send game")
    find("#send-input").send_keys("hello")
    find("#send-submit").click()
    wait_for(browser, lambda: "Only emoji" in find("#send-error").text, 30, "the inline error")
    assert find("#send-input").is_enabled() and not browser.find_elements(By.CSS_SELECTOR, "#send-turns .turn")
    find("#send-clear").click()
    find("#picker-search").send_keys("pizza")
    wait_for(browser, lambda: find("#picker-grid .picker-emoji").text == "🍕", 30, "the picker's search")
    find("#picker-grid .picker-emoji").click()
    # chromedriver types only the basic plane: a keyboard emoji goes in as an input event
    browser.execute_script("const i = document.getElementById('send-input'); i.value += arguments[0]; i.dispatchEvent(new Event('input'))", "🌙")
    assert find("#send-input").get_attribute("value") == "🍕🌙"
    find("#send-submit").click()
    wait_for(browser, lambda: find("#send-turns .guess-text").text, what="the judge's guess")
    assert find("#send-error").text == "" and find("#send-turns .emoji").text == "🍕🌙"
    assert find("#send-turns .similarity").text
    wait_for(browser, lambda: find("#send-result").text or find("#send-input").is_enabled(), what="the next turn")
    browser.save_screenshot(str(IMAGES / "serve-send.png"))  # the judge's first guess, the picker open
    if not find("#send-result").text:  # a miss: one more turn (grpo.toml plays 2)
        find("#picker-search").clear()
        find("#picker-search").send_keys("night")
        wait_for(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, "#picker-grid .picker-emoji")) > 1, 30, "the picker")
        for button in browser.find_elements(By.CSS_SELECTOR, "#picker-grid .picker-emoji")[:2]:
            button.click()
        find("#send-submit").click()
        wait_for(browser, lambda: find("#send-result").text, what="the result")
    assert "The message was" in find("#send-result").text

    # both finished games are in the log, in order
    assert [r["mode"] for r in read_games(real_service.log.path)][-2:] == ["guess", "send"]

    # Watch: the model against the judge, turn by turn; Runs: a run's curves and episodes.
    find("#tab-watch").click()
    find("#watch-message").send_keys(TARGET)
    find("#watch-new").click()
    wait_for(browser, lambda: find("#watch-result").text, what="the watched game")
    assert find("#watch-target").text == TARGET and browser.find_elements(By.CSS_SELECTOR, "#watch-turns .guess-text")
    browser.save_screenshot(str(IMAGES / "serve-watch.png"))
    find("#tab-runs").click()
    wait_for(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, "#runs-curves svg")) == 4, 30, "the run's curves")
    wait_for(browser, lambda: len(browser.find_elements(By.CSS_SELECTOR, "#runs-episodes .episode")) == 3, 30, "the run's episodes")
    assert find("#runs-episodes .guess-text").text == SCRIPT and browser.execute_script("return window.pwned === undefined")
    browser.save_screenshot(str(IMAGES / "serve-runs.png"))
