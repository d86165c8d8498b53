"""The shared helpers of issue 19: one atomic writer (emojikit.support.io), one retry policy
(emojikit.support.retry), one guess cleaner (emojikit.play.guesses), eval flags as settings, declared
capabilities instead of hasattr, the datum's own decode budget, the Tinker acceptance rate."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.play.guesses import clean_guess
from emojikit.support.io import atomic_directory, atomic_path, atomic_write_text, save_png
from emojikit.api.policy import SampleTotals, acceptance_between, sample_totals
from emojikit.support.retry import Backoff, retry_after

REPO = Path(__file__).resolve().parents[1]
SOURCES = [p for root in ("emojikit", "plugins") for p in sorted((REPO / root).rglob("*.py"))]


def source(path: Path) -> str:
    return path.read_text(encoding="utf-8")


# --- one atomic writer -----------------------------------------------------------------------


def test_atomic_path_replaces_whole_or_keeps_the_old_file(tmp_path):
    target = tmp_path / "sub" / "cache.npy"
    with atomic_path(target, suffix=".npy") as tmp:
        assert tmp.parent == target.parent and tmp.name.endswith(".npy") and tmp != target
        tmp.write_bytes(b"first")
    assert target.read_bytes() == b"first"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("killed mid-write")
    assert target.read_bytes() == b"first" and sorted(p.name for p in target.parent.iterdir()) == ["cache.npy"]
    atomic_write_text(tmp_path / "a.txt", "héllo\n")
    assert (tmp_path / "a.txt").read_text(encoding="utf-8") == "héllo\n"


def test_save_png_writes_through_a_png_temp_name(tmp_path):
    class Figure:
        def savefig(self, path, format, dpi):
            assert str(path).endswith(".png") and format == "png" and dpi == 100
            Path(path).write_bytes(b"\x89PNG")

    save_png(Figure(), tmp_path / "chart.png")
    assert [p.name for p in tmp_path.iterdir()] == ["chart.png"]


def test_atomic_directory_replaces_keeps_first_or_cleans_up(tmp_path):
    folder = tmp_path / "step_2"
    with atomic_directory(folder) as tmp:
        (tmp / "a").write_text("1")
    with atomic_directory(folder) as tmp:  # an older folder is replaced, never merged
        (tmp / "b").write_text("2")
    assert [p.name for p in folder.iterdir()] == ["b"]
    with pytest.raises(OSError), atomic_directory(folder, replace=False) as tmp:
        (tmp / "c").write_text("3")  # another writer's copy is in place: it stays
    assert [p.name for p in folder.iterdir()] == ["b"]
    with pytest.raises(KeyError), atomic_directory(folder) as tmp:
        raise KeyError("fill failed")
    (tmp_path / ".step_4.tmp").mkdir()  # left by a killed run
    (tmp_path / ".step_4.tmp" / "junk").write_text("x")
    with atomic_directory(tmp_path / "step_4", tmp_name=".step_4.tmp") as tmp:
        assert tmp.name == ".step_4.tmp" and not any(tmp.iterdir())
        (tmp / "ok").write_text("1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_2", "step_4"]


def test_no_other_temp_file_then_rename_writer():
    """Every temp-then-rename write goes through emojikit/support/io.py."""
    pattern = re.compile(r"os\.replace\(|os\.rename\(|mkstemp\(|mkdtemp\(|\.with_suffix\(\"\.tmp|tmp\.replace\(")
    found = [f"{p.relative_to(REPO)}:{n}" for p in SOURCES if p.name != "io.py" or p.parent.name != "support"
             for n, line in enumerate(source(p).splitlines(), 1) if pattern.search(line)]
    assert found == []


# --- one retry policy ------------------------------------------------------------------------


def test_backoff_delays_honour_retry_after_and_jitter():
    backoff = Backoff(max_retries=10, initial_s=1.0, max_s=8.0, jitter=0.5, rng=random.Random(0))
    for retry in range(8):
        step = min(8.0, 2.0**retry)
        assert step * 0.5 <= backoff.delay(retry) <= step
    assert backoff.delay(0, 30.0) == 30.0 and Backoff(retry_after_max_s=5.0).delay(0, 30.0) == 5.0
    assert retry_after({"retry-after-ms": "2500"}) == 2.5 and retry_after({"retry-after": "3"}) == 3.0
    assert retry_after({"retry-after": "Wed, 21 Oct 2015 07:28:00 GMT"}) is None and retry_after(None) is None


def test_backoff_run_retries_transient_errors_then_gives_up():
    waits, told = [], []
    backoff = Backoff(max_retries=2, sleep=waits.append, rng=random.Random(0))
    calls = iter([TimeoutError(), TimeoutError(), "done"])

    def flaky():
        value = next(calls)
        if isinstance(value, Exception):
            raise value
        return value

    transient = lambda exc: isinstance(exc, TimeoutError)  # noqa: E731
    assert backoff.run(flaky, transient, on_retry=lambda exc, retry, wait: told.append(retry)) == "done"
    assert told == [0, 1] and len(waits) == 2
    with pytest.raises(TimeoutError):  # the retries ran out: the last error
        backoff.run(lambda: (_ for _ in ()).throw(TimeoutError()), transient)
    assert len(waits) == 4
    with pytest.raises(ValueError):  # not transient: at once
        backoff.run(lambda: (_ for _ in ()).throw(ValueError()), transient)
    assert len(waits) == 4


def test_vendor_clients_use_the_core_retry_policy():
    from emojikit_claude.client import Backoff as ClaudeBackoff
    from emojikit_tinker.config import RetrySettings
    from emojikit_tinker.retry import Retrier

    assert issubclass(ClaudeBackoff, Backoff)
    backoff = Retrier(RetrySettings(max_attempts=3, backoff_seconds=2.0, jitter=0.25)).backoff
    assert isinstance(backoff, Backoff) and (backoff.max_retries, backoff.initial_s, backoff.jitter) == (2, 2.0, 0.25)
    for path in SOURCES:  # no second backoff loop
        if path.name != "retry.py" or path.parent.name != "support":
            assert "2.0**" not in source(path).replace(" ", "") and "2**(attempt" not in source(path).replace(" ", ""), path


# --- one guess cleaner -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw, options, cleaned",
    [
        # the Claude judge
        ("I got promoted!", {"max_chars": 200}, "I got promoted!"),
        ("\n\n  My guess: 'It is raining'  \nexplanation", {"max_chars": 200}, "It is raining"),
        ("**The message is: we won the game**", {"max_chars": 200}, "we won the game"),
        ("word " * 100, {"max_chars": 200}, ("word " * 40).strip()),
        # the Tinker judge
        ("<think>hmm, a party</think>\n\nGuess: \"We are having a party!\"\nBecause of 🎉", {"max_chars": 200}, "We are having a party!"),
        ("**I got the job**", {"max_chars": 200}, "I got the job"),
        ("  \n- Message: it is raining   today \n", {"max_chars": 200}, "it is raining today"),
        ("<think>never closed", {"max_chars": 200}, ""),
        ("word " * 100, {"max_chars": 20}, "word word word word"),
        # the local-lm judge: emoji echoed back and prompt lines copied are not the guess
        ('Message: "Pizza tonight!" 🍕\nMore text', {"max_words": 16, "drop_emoji": True}, "Pizza tonight!"),
        ("\n\nEmoji: 🍕 pizza\nThe answer is: let's eat", {"max_words": 16, "drop_emoji": True}, "let's eat"),
        ("🍕🍕\ufffd\nI got the job (finally) today", {"max_words": 4, "drop_emoji": True}, "I got the job"),
        ("Guess:\nPizza tonight", {}, "Pizza tonight"),  # a label alone on its line
    ],
)
def test_clean_guess(raw, options, cleaned):
    assert clean_guess(raw, **options) == cleaned


def test_one_clean_guess():
    defined = [p.relative_to(REPO).as_posix() for p in SOURCES if "def clean_guess" in source(p)]
    assert defined == ["emojikit/play/guesses.py"]


# --- eval flags are settings, declared capabilities ----------------------------------------------


def test_eval_applies_judge_and_set_together_and_flags_as_settings(tmp_path, monkeypatch):
    import emojikit.composition.recipe
    from emojikit.ui.cli import cli

    seen = {}
    real = emojikit.composition.recipe.load_recipe

    def capture(*args, **kwargs):
        seen["recipe"] = real(*args, **kwargs)
        raise SystemExit(0)  # stop before any model loads

    monkeypatch.setattr(emojikit.composition.recipe, "load_recipe", capture)
    targets = tmp_path / "t.txt"
    targets.write_text("hello there\n")
    args = ["eval", "--recipe", str(REPO / "recipes/eval.toml"), "--judge", "keywords", "--set", "judge.max_keywords=3",
            "--checkpoint", "base", "--checkpoint", "teacher:lexicon", "--targets", str(targets), "-n", "1",
            "--set", "eval.n_targets=5", "--out", str(tmp_path / "out")]
    CliRunner().invoke(cli, args, catch_exceptions=False)
    recipe = seen["recipe"]
    judge = recipe.components["judge"]
    assert judge.spec.name == "keywords" and judge.config.max_keywords == 3  # --set applies to the --judge
    settings = recipe.settings["eval"]
    assert settings.checkpoints == ["base", "teacher:lexicon"] and settings.n_targets == 1  # the flag wins over --set
    assert Path(settings.targets_file) == targets and recipe.out == tmp_path / "out"
    assert "f\"judge={{" not in source(REPO / "emojikit/ui/cli.py")


def test_loops_read_declared_capabilities_not_hasattr():
    for name in ("grpo.py", "evaluate.py"):
        assert 'hasattr(judge, "add_candidates")' not in source(next((REPO / "emojikit").rglob(name)))


# --- the decode budget of a datum --------------------------------------------------------------


def test_scoring_uses_the_datum_budget_not_the_latest_sample_call():
    from emojikit.api.policy import Datum, SamplingParams
    from test_local_backend import IdSetDecoder, TINY_VOCAB, tiny_policy

    policy = tiny_policy()
    decoder = IdSetDecoder(lambda tok: list(range(4, TINY_VOCAB, 2)))
    prompts = [[{"role": "user", "content": "w5 w6 w7"}], [{"role": "user", "content": "w9 w10 w11"}]]
    samples = [s for g in policy.sample(prompts, 4, SamplingParams(max_tokens=5, temperature=0.7, seed=3), decoder) for s in g]
    datums = [Datum.from_sample(s, advantage=1.0, decoded=True, decode_budget=5) for s in samples]
    policy.sample(prompts, 1, SamplingParams(max_tokens=40, temperature=0.7, seed=4), decoder)  # a later call, another budget
    for s, lp in zip(samples, policy.compute_logprobs(datums, temperature=0.7, decoder=decoder)):
        assert lp[-len(s.tokens):] == pytest.approx(s.logprobs, abs=1e-3)


# --- the Tinker acceptance rate ------------------------------------------------------------------


def test_acceptance_between_two_readings():
    assert acceptance_between(None, None) == {} and acceptance_between({"drawn": 4.0, "accepted": 4.0}, {"drawn": 4.0, "accepted": 4.0}) == {}
    assert acceptance_between({"drawn": 4.0, "accepted": 3.0}, {"drawn": 14.0, "accepted": 8.0}) == {"acceptance_rate": 0.5}

    class Masking:  # a policy that masks logits keeps no totals
        pass

    assert sample_totals(Masking()) is None


def test_tinker_policy_keeps_sample_totals(service):
    from test_tinker import CHAT, PARAMS, ParityDecoder, make_policy

    policy = make_policy(service, max_redraws=8)
    assert isinstance(policy, SampleTotals)
    before = sample_totals(policy)
    policy.sample([CHAT, [{"role": "user", "content": "pizza tonight?"}]], 2, PARAMS, ParityDecoder())
    stats = policy.last_sample_stats
    assert sample_totals(policy) == {"drawn": before["drawn"] + stats["drawn"], "accepted": before["accepted"] + stats["accepted"]}
    assert acceptance_between(before, sample_totals(policy)) == {"acceptance_rate": pytest.approx(stats["acceptance_rate"])}


from test_tinker import service, tokenizer  # noqa: E402,F401 - fixtures
