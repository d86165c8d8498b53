"""chat, play --human, inspect, report and eval, driven through the CLI.

inspect and report read a run directory written here in the formats grpo.py writes (the
same RunDir.log, episode_to_json, before_after_table and reward breakdowns). chat, play
--human and eval use the real bundled sender through the local backend and the emoji mask.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.api import emojis
from emojikit.ui.cli import cli
from emojikit.api.components import Episode, EpisodeTurn, Message
from emojikit.play.game import episode_to_json
from emojikit.training.grpo import EPISODES_FILE, EVAL_FILE, METRICS_FILE, before_after_table, summarize
from emojikit.ui.inspect_run import select_episodes
from emojikit.support.io import atomic_write_text
from emojikit.stages.runs import RunDir

from emojikit_retrieval.reward import SimilarityReward

REPO = Path(__file__).resolve().parent.parent
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"

# target -> per turn (emoji, guess, similarity); the reward breakdowns come from the real reward.
SCRIPT = {
    1: {
        "Let's get pizza tonight": [("🍕🌙", "Pizza tonight?", 0.91)],
        "I missed the bus again": [("🚌😩", "The bus is late", 0.52), ("🚌🏃💨", "I missed the bus", 0.83)],
    },
    2: {
        "Let's get pizza tonight": [("🍕🍕🍕🍕", "I love pizza", 0.62), ("🍕🌙🌙", "Pizza tonight", 0.88)],
        "Happy birthday, grandma!": [("🎂👵", "Happy birthday, grandma!", 1.0)],
        "The cat is sleeping on my keyboard": [("🐈😴⌨️", "My cat is tired", 0.41), ("🐈⌨️", "A cat", 0.35), ("words", "", 0.0)],
    },
}


def synthetic_run(path: Path) -> dict[int, list[Episode]]:
    """A two-step GRPO run directory: metrics, episodes, held-out evals, before/after table."""
    reward = SimilarityReward()
    by_step = {}
    with RunDir(path, recipe_toml=(REPO / "recipes/grpo.toml").read_text()) as run:
        run.log(EVAL_FILE, {"step": 0, "targets": 2, "success_rate": 0.0, "similarity": 0.31, "mean_turns": 3.0, "format_violations": 0.0})
        for step, script in SCRIPT.items():
            episodes = []
            for target, turns in script.items():
                ep = Episode(target=target, category="test")
                for emoji, guess, sim in turns:
                    ep.turns.append(EpisodeTurn(emoji=emoji, valid=emojis.is_emoji_only(emoji, 2, 8), guess=guess, similarity=sim))
                ep.success = ep.turns[-1].similarity >= reward.success_threshold
                episodes.append(ep)
            for ep, breakdown in zip(episodes, reward.score(episodes)):
                ep.reward = breakdown
            for ep in episodes:
                run.log(EPISODES_FILE, {"step": step, "group": episodes.index(ep), **episode_to_json(ep)})
            rewards = [ep.reward["total"] for ep in episodes]
            row = {"step": step, "reward_mean": sum(rewards) / len(rewards), "reward_std": 0.1, **summarize(episodes), "kl": 0.001 * step, "loss": 0.5 / step}
            run.log(METRICS_FILE, row)
            by_step[step] = episodes
        after = {"step": 2, "targets": 2, "success_rate": 0.5, "similarity": 0.72, "mean_turns": 2.0, "format_violations": 0.0}
        run.log(EVAL_FILE, after)
        atomic_write_text(run.file("before_after.md"), before_after_table(run.read(EVAL_FILE)[0], after))
    return by_step


@pytest.fixture()
def run_dir(tmp_path) -> Path:
    synthetic_run(tmp_path / "grpo")
    return tmp_path / "grpo"


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


def assert_one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("emojikit: error: ") and not result.stdout, result.output
    for fragment in fragments:
        assert fragment in lines[0]


# --- inspect -----------------------------------------------------------------------------------


def test_inspect_shows_every_episode_with_turns_and_reward(run_dir):
    result = invoke("inspect", run_dir)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[0] == f"{run_dir}: 5 of 5 episodes, steps 1-2"
    assert result.stdout.count("  target   ") == 5
    # every turn of the three-turn episode: emoji, the judge's guess, similarity, the invalid mark
    assert "turn 3   sender  words  (not valid emoji)" in result.stdout
    assert 'judge   "My cat is tired"  similarity 0.410' in result.stdout
    assert "reward   total" in result.stdout and "repetition_penalty" in result.stdout


def test_inspect_filters_by_step_and_target_and_sorts_by_reward(run_dir):
    by_step = synthetic_run(run_dir.parent / "again")
    step2 = invoke("inspect", run_dir, "--step", 2)
    assert step2.stdout.splitlines()[0].startswith(f"{run_dir}: 3 of 5 episodes")
    assert "step 1 ·" not in step2.stdout

    pizza = invoke("inspect", run_dir, "--target", "PIZZA")
    targets = [line.split("target   ")[1] for line in pizza.stdout.splitlines() if "target   " in line]
    assert targets == ["Let's get pizza tonight"] * 2

    everything = [ep for step in (1, 2) for ep in by_step[step]]
    worst = invoke("inspect", run_dir, "--worst", 2)
    totals = [float(line.split("reward ")[1].split(" ·")[0]) for line in worst.stdout.splitlines() if " · reward " in line]
    expected = sorted(ep.reward["total"] for ep in everything)[:2]
    assert totals == pytest.approx(expected, abs=1e-3)

    best = invoke("inspect", run_dir, "--best", 1, "--step", 2)
    assert "Happy birthday, grandma!" in best.stdout and best.stdout.count("  target   ") == 1

    none = invoke("inspect", run_dir, "--target", "no such message")
    assert none.exit_code == 0 and none.stdout.strip() == f"{run_dir}: 0 of 5 episodes, steps 1-2"


def test_select_episodes_orders_and_limits():
    rows = [{"step": s, "target": t, "reward": {"total": r}, "turns": []} for s, t, r in [(1, "a", 0.2), (1, "b", -0.5), (2, "ab", 0.9), (2, "c", 0.1)]]
    assert [r["target"] for r in select_episodes(rows, worst=3)] == ["b", "c", "a"]
    assert [r["target"] for r in select_episodes(rows, best=2)] == ["ab", "a"]
    assert [r["target"] for r in select_episodes(rows, step=2, target="A")] == ["ab"]


def test_inspect_errors_are_one_line(tmp_path, run_dir):
    assert_one_line_error(invoke("inspect", tmp_path / "missing"), "missing: no such run directory")
    assert_one_line_error(invoke("inspect", tmp_path), "not a run directory")
    (tmp_path / "file.txt").write_text("x")
    assert_one_line_error(invoke("inspect", tmp_path / "file.txt"), "not a directory")
    assert_one_line_error(invoke("inspect", run_dir, "--worst", 1, "--best", 1), "--worst and --best")

    sft_like = tmp_path / "sft"
    sft_like.mkdir()
    (sft_like / "metrics.jsonl").write_text('{"step": 1, "loss": 2.0}\n')
    assert_one_line_error(invoke("inspect", sft_like), "no episodes.jsonl")

    lines = (run_dir / "episodes.jsonl").read_text().splitlines()
    (run_dir / "episodes.jsonl").write_text("\n".join(lines[:2] + ["{not json"] + lines[2:]) + "\n")
    assert_one_line_error(invoke("inspect", run_dir), "episodes.jsonl:3: not valid JSON")
    (run_dir / "episodes.jsonl").write_text(lines[0] + "\n" + json.dumps({"step": 1, "turns": [], "reward": {}}) + "\n")
    assert_one_line_error(invoke("inspect", run_dir), "episodes.jsonl:2: target")


def test_a_missing_run_says_how_it_comes_to_be(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_one_line_error(invoke("report", "runs/grpo"), "runs/grpo: no such run directory (make one with: emojikit run RECIPE)")
    (tmp_path / "runs" / "sft").mkdir(parents=True)
    (tmp_path / "runs" / "sft" / "recipe.toml").write_text('kind = "sft"\n')
    assert_one_line_error(invoke("report", "runs/grpo"), "runs/grpo: no such run directory (run directories in runs: sft)")
    (tmp_path / "recipes").mkdir()
    (tmp_path / "recipes" / "grpo.toml").write_text('kind = "grpo"\n')
    assert_one_line_error(invoke("report", "runs/grpo"), "runs/grpo: no such run directory (make it with: emojikit run recipes/grpo.toml)")


# --- report -------------------------------------------------------------------------------------


def assert_valid_png(path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image
    from PIL import Image

    assert path.read_bytes()[:8] == PNG_SIGNATURE, path
    with Image.open(path) as image:
        image.verify()
    pixels = matplotlib.image.imread(str(path))
    assert pixels.ndim == 3 and pixels.shape[0] > 100 and pixels.shape[1] > 100


def test_report_writes_valid_pngs_and_a_markdown_report(run_dir):
    result = invoke("report", run_dir)
    assert result.exit_code == 0, result.output
    out = run_dir / "report"
    pngs = sorted(p.name for p in out.glob("*.png"))
    assert pngs == sorted(["overview.png", "reward.png", "similarity.png", "success_rate.png", "kl.png", "turns.png", "loss.png"])
    for name in pngs:
        assert_valid_png(out / name)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temp files left behind

    report = (out / "report.md").read_text()
    for name in pngs:
        assert f"]({name})" in report
    assert (run_dir / "before_after.md").read_text().strip() in report
    assert "| 0 | 2 | 0.000 | - | - | 0.310 | 3.00 | 0.000 |" in report  # eval.jsonl, every held-out evaluation (these rows have no repair figures)
    assert "## Example episodes" in report and "From step 2." in report
    best, worst = report.split("### Best")[1].split("### Worst")
    assert "Happy birthday, grandma!" in best and "keyboard" in worst
    assert "step 1 ·" not in report  # examples come from the last step

    # Re-running replaces the report in place.
    again = invoke("report", run_dir, "--out", run_dir.parent / "elsewhere", "--examples", 1)
    assert again.exit_code == 0 and (run_dir.parent / "elsewhere" / "report.md").exists()
    assert "](../grpo/" not in (run_dir.parent / "elsewhere" / "report.md").read_text()


def test_report_of_a_data_run_shows_its_figures(tmp_path):
    run = tmp_path / "data"
    run.mkdir()
    (run / "recipe.toml").write_text('kind = "data"\nname = "data"\n[teacher]\nuse = "lexicon"\n')
    (run / "data_stats.json").write_text(json.dumps({"messages": 25200, "excluded_messages": 48, "sft_train": 23750, "reading_seconds": 290.5,
                                                    "answers_kept_from": {"teacher": 20000, "teacher_variants[1]": 3750}}))
    result = invoke("report", run)
    assert result.exit_code == 0, result.output
    assert "a data run" in result.output
    report = (run / "report" / "report.md").read_text()
    assert "## Data" in report and "| excluded_messages | 48 |" in report and "| reading_seconds | 290.5 |" in report
    assert "| answers_kept_from | teacher: 20000, teacher_variants[1]: 3750 |" in report
    (run / "data_stats.json").write_text('{"messages": 3,\n')
    assert_one_line_error(invoke("report", run), "data_stats.json:2: not valid JSON")


def test_report_errors_are_one_line(tmp_path):
    assert_one_line_error(invoke("report", tmp_path), "not a run directory")
    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "reward_mean": 0.1}\n{"step": 2,\n{"step": 3}\n')
    assert_one_line_error(invoke("report", tmp_path), "metrics.jsonl:2: not valid JSON")


# --- the real sender: chat, play --human, eval ----------------------------------------------------


@pytest.fixture(scope="module")
def one_thread():
    # Two cores shared by several processes: one torch thread is much faster under contention.
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def saved_checkpoint(one_thread, tmp_path_factory) -> Path:
    """A real adapter checkpoint saved by the local backend (its start weights)."""
    from emojikit.api.components import BuildContext
    from emojikit.composition.registry import get_registry

    registry = get_registry()
    backend = registry.get("backend", "local")
    registry.get("decoder", "emoji-mask")
    policy = backend.factory(backend.config(), BuildContext(seed=0))
    path = tmp_path_factory.mktemp("ckpt") / "step_1"
    policy.save(str(path), with_optimizer=False)
    return path


def test_chat_answers_every_stdin_line_in_emoji(saved_checkpoint):
    lines = ["Let's get pizza tonight", "", "/reset", "I missed the bus again"]
    result = invoke(
        "chat", "--recipe", REPO / "recipes/grpo.toml", "--checkpoint", saved_checkpoint, "--seed", 0, "--max-emoji", 3,
        input="\n".join(lines) + "\n",
    )
    assert result.exit_code == 0, result.output
    answers = [line.removeprefix("emoji> ") for line in result.stdout.splitlines() if line.startswith("emoji> ")]
    assert len(answers) == 2  # one per non-empty line; /reset answers with a note, EOF ends the chat
    assert "(conversation forgotten)" in result.stdout
    for answer in answers:
        assert emojis.is_emoji_only(answer, 2, 3), answer

    missing = invoke("chat", "--checkpoint", saved_checkpoint.parent / "nope", input="hi\n")
    assert_one_line_error(missing, "not a checkpoint directory")


def test_play_human_scores_the_guesses_and_the_sender_sees_them(saved_checkpoint, monkeypatch):
    import emojikit.ui.interactive as interactive

    prompts = []
    real_build = interactive.build_parts

    class Recording:
        """The real policy; records each turn's prompt to check the sender sees the guess."""

        def __init__(self, policy):
            self.policy = policy

        def sample(self, batch, n, params, decoder=None):
            prompts.extend(batch)
            return self.policy.sample(batch, n, params, decoder)

        def __getattr__(self, name):
            return getattr(self.policy, name)

    def build_recording(*args, **kwargs):
        parts = real_build(*args, **kwargs)
        parts.components["backend"] = Recording(parts.components["backend"])
        return parts

    monkeypatch.setattr(interactive, "build_parts", build_recording)
    target = "Let's get pizza tonight"
    result = invoke(
        "play", "--human", "--recipe", REPO / "recipes/grpo.toml", "--message", target, "--seed", 0, "--max-turns", 3,
        input="The weather is nice\n\nLet's get pizza tonight\nnever read\n",
    )
    assert result.exit_code == 0, result.output
    out = result.stdout.splitlines()
    turns = [line for line in out if line.startswith("turn ")]
    assert len(turns) == 2 and turns[0].startswith("turn 1/3   model  ")
    for line in turns:
        assert emojis.is_emoji_only(line.split("model  ")[1], 2, 8), line
    miss = next(line for line in out if '"The weather is nice"' in line)
    assert "(best" in miss and "turn 1 of 3" in miss and "success" not in miss
    hit = next(line for line in out if f'"{target}"' in line)
    assert "similarity 1.000" in hit and "-> success!" in hit
    assert f"message  {target}" in out
    score = next(line for line in out if line.startswith("score "))
    assert "success on turn 2; turns used 2; best similarity 1.000; reward" in score
    # the second turn's prompt shows the sender the person's first guess, as in the game
    assert len(prompts) == 2 and "The weather is nice" in prompts[1][-1]["content"]
    assert prompts[1][-2] == {"role": "assistant", "content": turns[0].split("model  ")[1]}


def test_play_human_draws_a_random_target_from_the_prompt_source():
    from emojikit.ui.interactive import Parts, pick_target
    from emojikit.play.game import GameSettings
    from emojikit.composition.registry import get_registry
    from emojikit.api.components import BuildContext

    spec = get_registry().get("prompt_source", "generated")
    source = spec.factory(spec.config(), BuildContext(seed=0))
    parts = Parts({"prompts": source}, GameSettings())
    pool = list(source.messages(512))
    assert pick_target(parts, None, 7) == random.Random(7).choice(pool) == pick_target(parts, None, 7)
    assert pick_target(parts, "  hello  ", 7) == Message("hello", "cli")


def test_eval_on_two_checkpoints_writes_consistent_json_and_markdown(saved_checkpoint, tmp_path):
    out = tmp_path / "eval"
    result = invoke(
        "eval", "--recipe", REPO / "recipes/eval.toml", "--checkpoint", "base", "--checkpoint", saved_checkpoint,
        "--set", "eval.n_targets=2", "--set", "game.max_turns=1", "--set", "eval.unmasked=false", "--out", out,
    )
    assert result.exit_code == 0, result.output
    results = json.loads((out / "eval.json").read_text())
    markdown = (out / "eval.md").read_text()
    names = ["base", str(saved_checkpoint)]
    assert list(results["checkpoints"]) == names and results["targets"] == 2
    assert f"{results['targets']} targets" in markdown
    rows: dict = {}
    for line in markdown.splitlines():  # the first table's row per sender (later tables have rows per sender too)
        if line.startswith("| "):
            rows.setdefault(line.split(" | ")[0].lstrip("| "), line)
    for name in names:
        entry = results["checkpoints"][name]["masked"]
        assert entry["episodes"] == results["targets"]
        repair = f"{entry['repair_rate']:.3f} ({entry['repair_wins']}/{entry['first_turn_misses']})"
        assert rows[name].startswith(f"| {name} | {entry['success_rate']:.3f} | {entry['first_turn_success']:.3f} | {repair} | {entry['similarity']:.3f} | {entry['mean_turns']:.2f} |")
        assert sum(c["episodes"] for c in results["checkpoints"][name]["categories"].values()) == results["targets"]
    assert_valid_png(out / "eval.png")

    # report on an eval run directory carries its table and chart
    report = invoke("report", out)
    assert report.exit_code == 0 and "no training metrics" in report.stdout
    text = (out / "report" / "report.md").read_text()
    assert markdown.strip() in text and "](../eval.png)" in text


@pytest.mark.slow
def test_inspect_and_report_on_a_real_tiny_grpo_run(saved_checkpoint, tmp_path):
    out = tmp_path / "grpo"
    result = invoke(
        "run", REPO / "recipes/grpo.toml", "--set", "grpo.steps=1", "--set", "grpo.batch_size=2", "--set", "grpo.group_size=2",
        "--set", "grpo.eval_targets=2", "--set", "game.max_turns=1", "--set", "grpo.start_from=base", "--set", f"out={json.dumps(str(out))}",
    )
    assert result.exit_code == 0, result.output
    shown = invoke("inspect", out, "--best", 1)
    assert shown.exit_code == 0 and shown.stdout.count("  target   ") == 1
    assert invoke("report", out).exit_code == 0
    for name in ("overview.png", "reward.png", "similarity.png", "success_rate.png", "turns.png"):
        assert_valid_png(out / "report" / name)
    text = (out / "report" / "report.md").read_text()
    assert "## Held-out evaluation" in text and "| grpo |" in text and "teacher (lexicon)" in text  # the main job's comparison
