"""The Starlette app of `emojikit serve`: a JSON API, the static page, input caps, security headers.

The page renders every text with textContent (never as HTML) and the Content-Security-Policy
allows only this server's own scripts and styles, so a message or guess holding `<script>`
shows as text. Request bodies are capped before they are read whole.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
from pathlib import Path
from typing import Any, Optional

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from emojikit.api import emojis
from emojikit.evaluation.human_games import HumanGameLog
from emojikit.ui.web import runs
from emojikit.ui.web.games import GameInputError, GameNotFound, GameService

STATIC = Path(__file__).parent / "static"
MAX_BODY = 8 * 1024  # bytes of a JSON request body
MAX_QUERY = 100  # characters of a search or filter
PICKER_RESULTS = 96

SECURITY_HEADERS = [
    (b"content-security-policy", b"default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
]

# The picker's first page: faces, gestures, people, animals, food, places, weather, things.
PALETTE = (
    "😀 😂 🥲 😍 🥰 😎 🤔 😴 😭 😡 😱 🤯 🥳 🤒 😬 🙄 👍 👎 👏 🙏 💪 👋 🤝 ❤️ 💔 🔥 ✨ 🎉 💯 ❓ "
    "👶 👧 👨 👩 👵 👴 👨‍👩‍👧 🧑‍🍳 🧑‍🏫 🏃 🚶 🏊 🚴 ⚽ 🏀 🎸 🎤 🎮 📚 💼 💻 📱 💰 🛒 🎁 🏆 "
    "🐶 🐱 🐦 🐴 🐟 🌳 🌸 🌊 ☀️ 🌧️ ❄️ 🌈 ⛈️ 🌙 ⭐ "
    "🍕 🍔 🍝 🍣 🍰 🍦 🍎 🍌 ☕ 🍺 🍷 🥗 🍞 "
    "🏠 🏫 🏥 🏖️ ⛰️ 🏙️ ✈️ 🚗 🚌 🚂 🚢 ⏰ 📅 🎂 🎄 💍 ⚠️ ✅ ❌"
).split()


class BodyTooLarge(Exception):
    pass


async def _json_body(request: Request) -> dict:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY):
        raise BodyTooLarge()
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise BodyTooLarge()
        chunks.append(chunk)
    try:
        body = json.loads(b"".join(chunks) or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        raise GameInputError("the request body is not JSON") from None
    if not isinstance(body, dict):
        raise GameInputError("the request body must be a JSON object")
    return body


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


def _handled(handler):
    """Bad input -> 400 with a message for the page; unknown game or run -> 404."""

    async def endpoint(request: Request) -> Response:
        try:
            return await handler(request)
        except GameInputError as exc:
            return _error(400, str(exc))
        except BodyTooLarge:
            return _error(413, f"request body over {MAX_BODY} bytes")
        except (GameNotFound, runs.RunNotFound):
            return _error(404, "not found (the server may have restarted: start a new game)")

    return endpoint


def picker(query: str) -> list[dict]:
    """Emoji for the picker: the palette, or inventory emoji whose CLDR name contains the query."""
    query = " ".join(query.casefold().split())[:MAX_QUERY]
    if not query:
        return [{"emoji": e, "name": emojis.name(e)} for e in PALETTE]
    inventory = emojis.inventory(exclude_skin_tones=True)
    starts = [e for e in inventory if emojis.name(e).casefold().startswith(query)]
    within = [e for e in inventory if query in emojis.name(e).casefold() and e not in set(starts)]
    return [{"emoji": e, "name": emojis.name(e)} for e in (starts + within)[:PICKER_RESULTS]]


def create_app(service: GameService, *, runs_root: Optional[Path] = None, start_worker: bool = True) -> Starlette:
    runs_root = Path(runs_root) if runs_root is not None else None

    async def index(request: Request) -> Response:
        return FileResponse(STATIC / "index.html", media_type="text/html; charset=utf-8")

    async def config(request: Request) -> Response:
        return JSONResponse({**service.config(), "runs": runs_root is not None, "loading": service.worker.pending()})

    async def emoji_search(request: Request) -> Response:
        return JSONResponse({"emoji": picker(request.query_params.get("q", ""))})

    async def new_game(request: Request) -> Response:
        body = await _json_body(request)
        return JSONResponse(service.new_game(str(body.get("mode", "")), checkpoint=body.get("checkpoint"), judge=body.get("judge"), message=body.get("message")))

    async def game_state(request: Request) -> Response:
        return JSONResponse(service.state(request.path_params["game_id"]))

    async def guess(request: Request) -> Response:
        body = await _json_body(request)
        return JSONResponse(service.guess(request.path_params["game_id"], body.get("guess")))

    async def send_emoji(request: Request) -> Response:
        body = await _json_body(request)
        return JSONResponse(service.send(request.path_params["game_id"], body.get("emoji")))

    async def run_list(request: Request) -> Response:
        return JSONResponse({"runs": await run_in_threadpool(runs.list_runs, runs_root) if runs_root else []})

    def _root() -> Path:
        if runs_root is None:
            raise runs.RunNotFound("")
        return runs_root

    async def run_metrics(request: Request) -> Response:
        return JSONResponse(await run_in_threadpool(runs.run_metrics, _root(), request.path_params["run_id"]))

    async def run_episodes(request: Request) -> Response:
        q = request.query_params
        step = q.get("step", "")
        if step and not step.lstrip("-").isdigit():
            raise GameInputError("step must be a whole number")
        order = q.get("order", "file")
        if order not in ("file", "best", "worst"):
            raise GameInputError("order must be file, best or worst")
        limit = q.get("limit", "20")
        result = await run_in_threadpool(
            runs.run_episodes, _root(), request.path_params["run_id"],
            step=int(step) if step else None, target=q.get("target", "")[:MAX_QUERY], order=order, limit=int(limit) if limit.isdigit() else 20,
        )
        return JSONResponse(result)

    @contextlib.asynccontextmanager
    async def lifespan(app):
        if start_worker:
            service.worker.start()
            # Load the models now, so the first game does not wait for them.
            service.worker.submit("warm", None, None, lambda _: None, lambda exc: None)
        try:
            yield
        finally:
            if start_worker:
                service.worker.stop()

    routes = [
        Route("/", index),
        Route("/api/config", _handled(config)),
        Route("/api/emoji", _handled(emoji_search)),
        Route("/api/games", _handled(new_game), methods=["POST"]),
        Route("/api/games/{game_id}", _handled(game_state)),
        Route("/api/games/{game_id}/guess", _handled(guess), methods=["POST"]),
        Route("/api/games/{game_id}/emoji", _handled(send_emoji), methods=["POST"]),
        Route("/api/runs", _handled(run_list)),
        Route("/api/runs/{run_id}/metrics", _handled(run_metrics)),
        Route("/api/runs/{run_id}/episodes", _handled(run_episodes)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.add_middleware(_SecurityHeaders)
    return app


class _SecurityHeaders:
    """Adds SECURITY_HEADERS to every HTTP response."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                message["headers"] = list(message.get("headers", [])) + SECURITY_HEADERS
            await send(message)

        await self.app(scope, receive, send_with_headers)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(
    *,
    recipe_path: Optional[Path],
    checkpoints: list[str],
    judges: list[str],
    serve_dir: Path,
    runs_root: Path,
    host: str,
    port: int,
    temperature: float,
    echo: Any = print,
    warn: Any = print,
) -> None:
    """`emojikit serve`: build the models, then run the app with uvicorn until interrupted."""
    import uvicorn

    from emojikit.ui.web.models import build_models
    from emojikit.ui.web.worker import ModelWorker

    models = build_models(recipe_path, checkpoints, judges, temperature)
    log = HumanGameLog(Path(serve_dir) / "human_games.jsonl")
    if log.dropped_bytes:
        warn(f"emojikit: warning: {log.path}: dropped a torn last line ({log.dropped_bytes} bytes) left by an interrupted write")
    service = GameService(models, ModelWorker(models.run), log)
    app = create_app(service, runs_root=runs_root)
    if not is_loopback(host):
        warn(f"emojikit: warning: serving on {host}: anyone who can reach this address can play and read your runs; the default is 127.0.0.1")
    echo(f"emojikit serve: http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}/  (checkpoints: {', '.join(c.id for c in models.checkpoints)}; judges: {', '.join(models.judge_names)}; human games -> {log.path})")
    uvicorn.run(app, host=host, port=port, log_level="warning")
