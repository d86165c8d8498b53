"""Load check of `emojikit serve`: concurrent Guess games against the bundled model over HTTP.

    python bench/serve_load.py               # 8 concurrent games, a table
    python bench/serve_load.py --json
    python bench/serve_load.py --games 2     # smoke run

The real app (recipes/grpo.toml's components: bundled SmolLM2 under the emoji mask, MiniLM
similarity) runs under uvicorn on a free loopback port. Each game is a client thread that
plays as the page does: start a Guess game on a held-out target, poll until the model's emoji
arrive, send a guess (a wrong one, so every game plays all max_turns), repeat. An answer's
latency (the model's emoji turn, or the score of the last guess) is from the request that asks
for it (new game or guess) to the poll that shows it; the worker batches the sender turns of
games that wait at the same time.
"""

from __future__ import annotations

import socket
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine, parser as bench_parser, print_header  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
WRONG_GUESS = "Something about the weather, I think"
POLL_S = 0.05


def play_one(base: str, latencies: list, errors: list, lock: threading.Lock, timeout: float) -> None:
    import httpx

    def settle(client, game, asked):
        deadline = time.monotonic() + timeout
        while game["status"] == "thinking":
            if time.monotonic() > deadline:
                raise TimeoutError("no answer within the timeout")
            time.sleep(POLL_S)
            game = client.get(f"{base}/api/games/{game['id']}").raise_for_status().json()
        if game["status"] == "error":
            raise RuntimeError(game["error"])
        with lock:
            latencies.append(time.perf_counter() - asked)
        return game

    try:
        with httpx.Client(timeout=30) as client:
            asked = time.perf_counter()
            game = settle(client, client.post(f"{base}/api/games", json={"mode": "guess"}).raise_for_status().json(), asked)
            while game["status"] == "your_turn":
                asked = time.perf_counter()
                game = settle(client, client.post(f"{base}/api/games/{game['id']}/guess", json={"guess": WRONG_GUESS}).raise_for_status().json(), asked)
            if game["status"] != "finished":
                raise RuntimeError(f"game ended as {game['status']}")
    except Exception as exc:  # counted, the load check reports every error
        with lock:
            errors.append(f"{type(exc).__name__}: {exc}")


def run(args) -> dict:
    import tempfile

    import torch
    import uvicorn

    from emojikit.evaluation.human_games import HumanGameLog
    from emojikit.ui.web.app import create_app
    from emojikit.ui.web.games import GameService
    from emojikit.ui.web.models import build_models
    from emojikit.ui.web.worker import ModelWorker

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    models = build_models(REPO / "recipes/grpo.toml", ["base"], [], temperature=0.7)
    service = GameService(models, ModelWorker(models.run), HumanGameLog(Path(tempfile.mkdtemp(prefix="serve-load-")) / "human_games.jsonl"))
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(service), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    while service.worker.pending():  # the warm-up job: models loaded before the clock starts
        time.sleep(0.1)
    load_s = time.perf_counter() - started

    latencies: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    base = f"http://127.0.0.1:{port}"
    clients = [threading.Thread(target=play_one, args=(base, latencies, errors, lock, args.timeout)) for _ in range(args.games)]
    began = time.perf_counter()
    for c in clients:
        c.start()
    for c in clients:
        c.join()
    wall = time.perf_counter() - began
    server.should_exit = True
    thread.join(30)
    ordered = sorted(latencies)
    return {
        "machine": machine(),
        "config": {"games": args.games, "max_turns": models.game.max_turns, "threads": args.threads, "recipe": "recipes/grpo.toml"},
        "games": args.games,
        "errors": errors,
        "answers": len(latencies),
        "median_turn_s": statistics.median(ordered) if ordered else None,
        "p90_turn_s": ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))] if ordered else None,
        "max_turn_s": ordered[-1] if ordered else None,
        "wall_s": wall,
        "load_s": load_s,
    }


def main() -> None:
    parser = bench_parser(__doc__, threads=1)
    parser.add_argument("--games", type=int, default=8, help="concurrent games")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds a turn may take before it counts as an error")
    args = parser.parse_args()
    result = run(args)
    if print_header(result, args.json):
        return
    fmt = lambda v: "-" if v is None else f"{v:.2f} s"  # noqa: E731
    print(f"| games | errors | answers (emoji turns and scored guesses) | median latency | p90 | max | wall time | model load |")
    print(f"|---|---|---|---|---|---|---|---|")
    print(f"| {result['games']} | {len(result['errors'])} | {result['answers']} | {fmt(result['median_turn_s'])} | {fmt(result['p90_turn_s'])} | {fmt(result['max_turn_s'])} | {fmt(result['wall_s'])} | {fmt(result['load_s'])} |")
    for error in result["errors"]:
        print(f"error: {error}")
    sys.exit(1 if result["errors"] else 0)


if __name__ == "__main__":
    main()
