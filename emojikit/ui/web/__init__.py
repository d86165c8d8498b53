"""`emojikit serve`: the game in a web page (Guess, Send, Watch, Runs).

worker.py   one thread owns every model; requests queue jobs, jobs of a kind are batched
models.py   the components the worker runs: senders per checkpoint, judges, reward, held-out targets
games.py    game state and rules for the three game modes (framework-free, tested directly)
runs.py     read-only views of run directories for the Runs mode
app.py      the Starlette app: JSON API, static page, input caps, security headers; serve()
static/     the page: plain HTML, JS and CSS, every asset local
"""
