"""`emojikit run` as a plan of stages: a recipe names the recipe that makes its input, and each
stage is reused, resumed or run (into a new directory when its recipe or inputs changed).

No model is trained here: the data, SFT and GRPO loops are replaced by fakes that write what a
real run writes (datasets, metrics, checkpoints) in milliseconds, and the recipes are tiny
copies in tmp_path. The last test kills a real `emojikit run` subprocess (kill -9) mid-SFT.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from recipe_texts import GRPO_COMPONENTS
from emojikit.stages import pipeline
from emojikit.ui.cli import cli
from emojikit.api.errors import ConfigError, RunDirectoryError

ROOT = Path(__file__).resolve().parents[1]

DATA = """kind = "data"
name = "data"
[prompts]
use = "generated"
[teacher]
use = "lexicon"
[data]
count = 20
"""

SFT = """kind = "sft"
name = "sft"
[backend]
use = "local"
[sft]
data = "data.toml"
steps = {steps}
save_every = 2
"""

GRPO = 'kind = "grpo"\nname = "grpo"\n' + GRPO_COMPONENTS + '[grpo]\nstart_from = "sft.toml"\nsteps = 2\n'


def chat_lines(n: int) -> str:
    rows = [{"messages": [{"role": "user", "content": f"message {i}"}, {"role": "assistant", "content": "🍕🎉"}]} for i in range(n)]
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


class FakePolicy:
    def load(self, path: str) -> None:
        pass


class Interrupt(Exception):
    """A stage stopped part-way (what kill -9 leaves behind: no `finished` record)."""


class FakeLoops:
    """Stand-ins for data.run, sft.run and grpo.run: they write what the real loops write and
    record what they were given; `stop_after[kind] = n` stops that loop after step n."""

    def __init__(self):
        self.calls: list[dict] = []
        self.stop_after: dict[str, int] = {}

    def runner(self, kind: str):
        def run(recipe, run_dir):
            call = {"kind": kind, "run_dir": run_dir.path, "resume": run_dir.resume}
            self.calls.append(call)
            if kind == "data":
                run_dir.file("sft_train.jsonl").write_text(chat_lines(8), encoding="utf-8")
                run_dir.file("sft_test.jsonl").write_text(chat_lines(2), encoding="utf-8")
                return
            settings = recipe.settings[kind]
            call["start_from"] = getattr(settings, "start_from", None)
            call["train_file"] = getattr(settings, "train_file", None)
            start = call["start_step"] = run_dir.resume_policy(FakePolicy(), ("metrics.jsonl",))
            for step in range(start + 1, settings.steps + 1):
                run_dir.log("metrics.jsonl", {"step": step})
                if step % 2 == 0 or step == settings.steps:
                    with run_dir.new_checkpoint(step) as tmp:
                        (tmp / "fake_weights.txt").write_text(f"{kind} {step}")
                if self.stop_after.get(kind) == step:
                    raise Interrupt(f"{kind} stopped after step {step}")
            if kind == "grpo":
                run_dir.file("comparison.md").write_text("| base | sft | grpo |\n", encoding="utf-8")

        return run


@pytest.fixture
def loops(tmp_path, monkeypatch) -> FakeLoops:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.toml").write_text(DATA, encoding="utf-8")
    (tmp_path / "sft.toml").write_text(SFT.format(steps=4), encoding="utf-8")
    (tmp_path / "grpo.toml").write_text(GRPO, encoding="utf-8")
    fakes = FakeLoops()
    import emojikit.training.data
    import emojikit.training.grpo
    import emojikit.training.sft

    for module, kind in ((emojikit.training.data, "data"), (emojikit.training.sft, "sft"), (emojikit.training.grpo, "grpo")):
        monkeypatch.setattr(module, "run", fakes.runner(kind))
    return fakes


def actions(stages) -> list[tuple[str, str, str]]:
    return [(s.kind, s.action, str(s.run_dir)) for s in stages]


def run_main_job(*args, **kwargs) -> list[str]:
    lines: list[str] = []
    pipeline.execute(pipeline.plan("grpo.toml", *args, **kwargs), echo=lines.append)
    return lines


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def record(run_dir: str) -> dict:
    return json.loads((Path(run_dir) / pipeline.STAGE_FILE).read_text())


# --- the plan ----------------------------------------------------------------------------------


def test_fresh_chain_runs_every_stage_upstream_first_with_one_header_each(loops):
    stages = pipeline.plan("grpo.toml")
    assert actions(stages) == [("data", "run", "runs/data"), ("sft", "run", "runs/sft"), ("grpo", "run", "runs/grpo")]
    assert all(s.why == "no run yet" for s in stages)

    lines = run_main_job()
    assert [c["kind"] for c in loops.calls] == ["data", "sft", "grpo"]
    assert [line.split(":")[0] for line in lines] == ["stage 1/3", "stage 2/3", "stage 3/3"]
    sft, grpo = loops.calls[1], loops.calls[2]
    assert sft["train_file"] == Path("runs/data/sft_train.jsonl")  # the data run's files
    assert grpo["start_from"] == "runs/sft/checkpoints/step_4"  # the SFT run's final checkpoint
    for run_dir, output in (("runs/data", "runs/data"), ("runs/sft", "runs/sft/checkpoints/step_4"), ("runs/grpo", "runs/grpo/checkpoints/step_2")):
        assert record(run_dir)["status"] == "finished" and record(run_dir)["output"] == output
    assert 'start_from = "runs/sft/checkpoints/step_4"' in Path("runs/grpo/recipe.toml").read_text()


def test_the_same_command_again_reuses_everything_and_says_so(loops, tmp_path):
    run_main_job()
    before = snapshot(tmp_path)
    loops.calls.clear()
    stages = pipeline.plan("grpo.toml")
    assert [s.action for s in stages] == ["reuse", "reuse", "reuse"]
    assert all("finished run of the same recipe and inputs" in s.why for s in stages)
    lines = run_main_job()
    assert loops.calls == []
    assert lines[-1] == "nothing to run: grpo.toml is up to date in runs/grpo"
    assert "| base | sft | grpo |\n" in lines  # the stored comparison is shown again
    assert snapshot(tmp_path) == before


def test_an_interrupted_stage_resumes_from_its_last_checkpoint(loops):
    loops.stop_after["sft"] = 3  # checkpoint step_2 is on disk, step 3 was logged after it
    with pytest.raises(Interrupt):
        run_main_job()
    assert record("runs/sft")["status"] == "running"
    stages = pipeline.plan("grpo.toml")
    assert [s.action for s in stages] == ["reuse", "resume", "run"]
    assert stages[1].why.startswith("interrupted at step_2; same recipe and inputs")

    loops.stop_after.clear()
    loops.calls.clear()
    run_main_job()
    assert [(c["kind"], c["resume"]) for c in loops.calls] == [("sft", True), ("grpo", False)]
    assert loops.calls[0]["start_step"] == 2
    steps = [json.loads(line)["step"] for line in Path("runs/sft/metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2, 3, 4]  # step 3 ran again, once
    assert record("runs/sft")["status"] == "finished"


def test_editing_the_sft_recipe_reruns_sft_and_grpo_into_new_directories_not_data(loops, tmp_path):
    run_main_job()
    old = {d: snapshot(tmp_path / "runs" / d) for d in ("data", "sft", "grpo")}
    Path("sft.toml").write_text(SFT.format(steps=6), encoding="utf-8")

    stages = pipeline.plan("grpo.toml")
    data, sft, grpo = stages
    assert data.action == "reuse" and data.run_dir == Path("runs/data")
    assert (sft.action, sft.run_dir) == ("run", Path(f"runs/sft-{sft.fingerprint[:8]}"))
    assert sft.why == "runs/sft holds another version (changed: sft.steps)"
    assert (grpo.action, grpo.run_dir) == ("run", Path(f"runs/grpo-{grpo.fingerprint[:8]}"))
    assert grpo.why == "runs/grpo holds another version (changed: upstream grpo.start_from)"

    loops.calls.clear()
    run_main_job()
    assert [c["kind"] for c in loops.calls] == ["sft", "grpo"]
    assert loops.calls[1]["start_from"] == f"{sft.run_dir}/checkpoints/step_6"
    assert {d: snapshot(tmp_path / "runs" / d) for d in ("data", "sft", "grpo")} == old  # never written over

    # Back to the first recipe: its runs are still there and are reused.
    Path("sft.toml").write_text(SFT.format(steps=4), encoding="utf-8")
    assert actions(pipeline.plan("grpo.toml")) == [("data", "reuse", "runs/data"), ("sft", "reuse", "runs/sft"), ("grpo", "reuse", "runs/grpo")]


def test_a_changed_input_file_is_a_changed_stage(loops, tmp_path):
    Path("train.jsonl").write_text(chat_lines(6), encoding="utf-8")
    Path("test.jsonl").write_text(chat_lines(2), encoding="utf-8")
    plain = ["sft.train_file=\"train.jsonl\"", "sft.test_file=\"test.jsonl\""]
    stages = pipeline.plan("sft.toml", plain)
    assert actions(stages) == [("sft", "run", "runs/sft")]  # plain paths win over [sft] data: no upstream
    assert set(stages[0].payload["inputs"]) == {"train.jsonl", "test.jsonl"}
    pipeline.execute(stages, echo=lambda line: None)
    assert pipeline.plan("sft.toml", plain)[0].action == "reuse"

    Path("train.jsonl").write_text(chat_lines(7), encoding="utf-8")
    stage = pipeline.plan("sft.toml", plain)[0]
    assert stage.action == "run" and stage.why == "runs/sft holds another version (changed: input train.jsonl)"


def test_commands_that_read_a_recipes_inputs_follow_its_upstream_wherever_it_ran(loops, tmp_path):
    # eval-sft reads the SFT recipe's test file: the data run's, even in runs/data-<fp8>.
    with pytest.raises(ConfigError, match="data.toml, which has no finished run.*make it with: emojikit run sft.toml"):
        pipeline.upstream_overrides("sft.toml")
    Path("runs/data").mkdir(parents=True)  # a run without a fingerprint: the data stage runs elsewhere
    Path("runs/data/data_stats.json").write_text("{}")
    pipeline.execute(pipeline.plan("sft.toml"), echo=lambda line: None)
    data_dir = next(p for p in (tmp_path / "runs").iterdir() if p.name.startswith("data-"))
    assert pipeline.upstream_overrides("sft.toml") == [
        f"sft.train_file={json.dumps(str(Path('runs') / data_dir.name / 'sft_train.jsonl'))}",
        f"sft.test_file={json.dumps(str(Path('runs') / data_dir.name / 'sft_test.jsonl'))}",
    ]
    assert pipeline.upstream_overrides("data.toml") == []


def test_no_upstream_runs_only_the_named_recipe(loops):
    with pytest.raises(ConfigError, match="--no-upstream: sft.toml has no finished run of its current recipe"):
        pipeline.plan("grpo.toml", no_upstream=True)
    run_main_job()
    Path("grpo.toml").write_text(GRPO.replace("steps = 2", "steps = 4"), encoding="utf-8")
    loops.calls.clear()
    run_main_job(no_upstream=True)
    assert [c["kind"] for c in loops.calls] == ["grpo"]

    Path("sft.toml").write_text(SFT.format(steps=6), encoding="utf-8")  # now SFT would have to run
    with pytest.raises(ConfigError, match="--no-upstream: sft.toml"):
        pipeline.plan("grpo.toml", no_upstream=True)


def test_dry_run_prints_the_plan_and_changes_nothing(loops, tmp_path):
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["run", "grpo.toml", "--dry-run"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[:3] == [  # each stage's size: what its minutes scale with
        "stage 1/3: data (data.toml) run runs/data: no run yet (20 messages to the teacher)",
        "stage 2/3: sft (sft.toml) run runs/sft: no run yet (4 steps of 16 chats)",
        "stage 3/3: grpo (grpo.toml) run runs/grpo: no run yet (2 steps of 16 targets x 4 episodes)",
    ]
    # and the machine they depend on
    assert lines[3].startswith("on ") and "`cpu_kind` " in lines[3] and lines[3].endswith("docs/experiments/main-job.md") and len(lines) == 4
    assert loops.calls == [] and snapshot(tmp_path) == before and not Path("runs").exists()


def test_a_reused_stage_needs_nothing_from_upstream(loops):
    run_main_job()
    import shutil

    shutil.rmtree("runs/sft")  # the GRPO run that started from it is still valid
    stages = pipeline.plan("grpo.toml")
    assert [(s.kind, s.action) for s in stages] == [("data", "reuse"), ("sft", "skip"), ("grpo", "reuse")]
    assert stages[1].why == "not needed: the stage after it is reused"
    loops.calls.clear()
    run_main_job()
    assert loops.calls == []


def test_a_changed_data_recipe_changes_every_stage_after_it(loops):
    run_main_job()
    Path("data.toml").write_text(DATA.replace("count = 20", "count = 30"), encoding="utf-8")
    assert [s.action for s in pipeline.plan("grpo.toml")] == ["run", "run", "run"]


def test_a_run_directory_without_a_fingerprint_is_left_alone(loops, tmp_path):
    Path("runs/sft").mkdir(parents=True)
    Path("runs/sft/metrics.jsonl").write_text('{"step": 1}\n')
    stage = pipeline.plan("sft.toml")[-1]
    assert stage.action == "run" and stage.run_dir == Path(f"runs/sft-{stage.fingerprint[:8]}")
    assert stage.why == "runs/sft holds a run without a fingerprint (not touched)"
    # --resume still means: continue the recipe's own directory
    assert pipeline.plan("sft.toml", resume=True)[-1].action == "resume"
    with pytest.raises(RunDirectoryError, match="runs/grpo: nothing to resume"):
        pipeline.plan("grpo.toml", resume=True)


def test_recipes_that_name_the_wrong_kind_or_each_other_fail_in_one_line(loops):
    Path("grpo.toml").write_text(GRPO.replace('start_from = "sft.toml"', 'start_from = "data.toml"'), encoding="utf-8")
    with pytest.raises(ConfigError, match=r"grpo.toml: \[grpo\] start_from: data.toml is a data recipe; expected a sft, grpo or rft recipe"):
        pipeline.plan("grpo.toml")
    Path("grpo.toml").write_text(GRPO.replace('start_from = "sft.toml"', 'start_from = "grpo.toml"'), encoding="utf-8")
    with pytest.raises(ConfigError, match="recipes name each other in a loop"):
        pipeline.plan("grpo.toml")
    Path("sft.toml").write_text(SFT.format(steps=4).replace('data = "data.toml"', 'data = "nothing.toml"'), encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", "sft.toml"])
    assert result.exit_code == 2 and "[sft] data: nothing.toml is not a recipe file" in result.output


def test_shipped_recipes_chain_data_sft_grpo(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    stages = pipeline.plan("recipes/grpo.toml")
    assert actions(stages) == [("data", "run", "runs/data"), ("sft", "run", "runs/sft"), ("grpo", "run", "runs/grpo")]
    assert stages[-1].recipe.settings["grpo"].compare


# --- the comparison at the end of the main job ---------------------------------------------------


def test_the_comparison_names_base_sft_grpo_and_the_teacher(loops, tmp_path, monkeypatch):
    from emojikit.evaluation import comparison
    from emojikit.composition.recipe import load_recipe
    from emojikit.stages.runs import RunDir

    run_main_job()
    played = {}

    def fake_evaluate(recipe, settings, targets, out_dir, **kwargs):
        played.update(checkpoints=settings.checkpoints, targets=len(targets), init_from=recipe.components["backend"].config.init_from)
        entry = {"masked": {"success_rate": 0.5, "similarity": 0.6, "mean_turns": 1.5, "format_violations": 0.0, "distinct_emoji": 9}, "categories": {}}
        return {"targets": len(targets), "seed": 0, "judge": "retrieval", "checkpoints": {c: entry for c in settings.checkpoints}}

    monkeypatch.setattr("emojikit.evaluation.evaluate.evaluate_checkpoints", fake_evaluate)
    recipe = load_recipe("grpo.toml", ["grpo.start_from=\"runs/sft/checkpoints/step_4\"", "grpo.eval_targets=3", "backend.init_from=\"runs/sft/checkpoints/step_4\""])
    with RunDir("runs/grpo", resume=True) as run_dir:
        table = comparison.write_comparison(recipe, run_dir, "runs/sft/checkpoints/step_4", "runs/grpo/checkpoints/step_2")
    assert played == {"checkpoints": ["base", "runs/sft/checkpoints/step_4", "runs/grpo/checkpoints/step_2", "teacher:lexicon"], "targets": 3, "init_from": None}
    summary, game = table.split("Held-out retrieval game", 1)
    for part in (summary, game):
        rows = [line.split(" | ")[0] for line in part.splitlines() if line.startswith("| ") and "0.500" in line]
        assert rows == ["| base", "| sft", "| grpo", "| teacher (lexicon)"]
    assert "sft = runs/sft/checkpoints/step_4" in table
    for suffix in ("md", "json", "png"):
        assert (tmp_path / "runs/grpo" / f"comparison.{suffix}").stat().st_size > 0


def test_the_comparison_sets_its_rows_beside_a_recorded_seed_spread(loops, tmp_path, monkeypatch):
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation import comparison, spread
    from emojikit.stages.runs import RunDir

    run_main_job()
    wins = {"runs/sft/checkpoints/step_4": [True, False, False], "runs/grpo/checkpoints/step_2": [True, True, False]}

    def fake_evaluate(recipe, settings, targets, out_dir, **kwargs):
        entry = lambda c: {"masked": {"success_rate": 0.5, "similarity": 0.6, "mean_turns": 1.5, "format_violations": 0.0, "distinct_emoji": 9},
                           "categories": {}, "per_target_success": wins.get(c, [False] * 3)}
        return {"targets": len(targets), "seed": 0, "judge": "retrieval", "checkpoints": {c: entry(c) for c in settings.checkpoints}}

    monkeypatch.setattr("emojikit.evaluation.evaluate.evaluate_checkpoints", fake_evaluate)
    record = {"format": spread.FORMAT, "recipe": {}, "start_recipe": {}, "runs": [{"seed": s, "start_seed": s, "machine": {"cpu_kind": "AVX2"}} for s in (0, 1)],
              "columns": {"retrieval: held-out": {"targets": 3, "start": ["100", "110"], "grpo": ["110", "100"]}}}
    Path("spread.json").write_text(json.dumps(record))
    recipe = load_recipe("grpo.toml", ["grpo.eval_targets=3", 'grpo.seed_spread="spread.json"'])
    with RunDir("runs/grpo", resume=True) as run_dir:
        table = comparison.write_comparison(recipe, run_dir, "runs/sft/checkpoints/step_4", "runs/grpo/checkpoints/step_2")
    assert "## Beside the recorded seed spread (`spread.json`)" in table and "start seed / GRPO seed: 0/0, 1/1; CPU: AVX2" in table
    assert "| retrieval (trained): held-out | 0.333 | 0.500 ± 0.236 | 0.667 | 0.500 ± 0.236 | +33.3 points | +0.0 ± 47.1 (+33.3 / -33.3; 0 vs 0, p 1) |  |" in table  # the same target gained, then lost: no target moved
    assert "The recorded runs had another recipe (differs in: backend.use," in table  # this record names no recipe
    assert "Inside noise: `retrieval: held-out` (+0.0)." in table
    saved = json.loads((tmp_path / "runs/grpo/comparison.json").read_text())
    assert saved["start_label"] == "sft" and set(saved["machine"]) == {"cpu", "cpu_kind", "cores"}
    assert f"Measured on {saved['machine']['cpu']}" in table
    assert "3 held-out targets: too few to measure anything, a check that the chain runs (one target moves a row by 33 points)." in table


def test_the_comparison_plays_every_row_of_compare_files_without_base(loops, tmp_path, monkeypatch):
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation import comparison
    from emojikit.play.targets import split_targets
    from emojikit.stages.runs import RunDir

    run_main_job()
    Path("real.jsonl").write_text("".join(json.dumps({"text": f"I adopted kitten number {i}"}) + "\n" for i in range(5)))
    plays = []

    def fake_evaluate(recipe, settings, targets, out_dir, **kwargs):
        plays.append((list(settings.checkpoints), [m.text for m in targets]))
        entry = {"masked": {"success_rate": 0.5, "similarity": 0.6, "mean_turns": 1.5, "format_violations": 0.0, "distinct_emoji": 9}, "categories": {}}
        return {"targets": len(targets), "seed": 0, "judge": "retrieval", "checkpoints": {c: entry for c in settings.checkpoints}}

    monkeypatch.setattr("emojikit.evaluation.evaluate.evaluate_checkpoints", fake_evaluate)
    recipe = load_recipe("grpo.toml", ["grpo.eval_targets=3", 'grpo.compare_files=["real.jsonl"]'])
    with RunDir("runs/grpo", resume=True) as run_dir:
        table = comparison.write_comparison(recipe, run_dir, "runs/sft/checkpoints/step_4", "runs/grpo/checkpoints/step_2")
        _, train = split_targets(recipe, recipe.settings["grpo"], run_dir)
    (main, _), (extra, texts) = plays
    assert main[0] == "base" and extra == main[1:] and texts == [f"I adopted kitten number {i}" for i in range(5)]
    assert "### real.jsonl (every message; base left out)" in table
    saved = json.loads((tmp_path / "runs/grpo/comparison.json").read_text())
    assert saved["compare_files"]["real.jsonl"]["targets"] == 5
    assert not {m.text for m in train} & set(texts)  # a compared message never trains


def test_compare_rows_plays_the_first_rows_with_every_row_in_the_pool(loops, tmp_path, monkeypatch):
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation import comparison
    from emojikit.stages.runs import RunDir

    run_main_job()
    Path("real.jsonl").write_text("".join(json.dumps({"text": f"I adopted kitten number {i}"}) + "\n" for i in range(5)))
    plays = []

    def fake_evaluate(recipe, settings, targets, out_dir, pool=(), **kwargs):
        plays.append(([m.text for m in targets], list(pool)))
        entry = {"masked": {"success_rate": 0.5, "similarity": 0.6, "mean_turns": 1.5, "format_violations": 0.0, "distinct_emoji": 9}, "categories": {}}
        return {"targets": len(targets), "seed": 0, "judge": "retrieval", "checkpoints": {c: entry for c in settings.checkpoints}}

    monkeypatch.setattr("emojikit.evaluation.evaluate.evaluate_checkpoints", fake_evaluate)
    recipe = load_recipe("grpo.toml", ["grpo.eval_targets=3", 'grpo.compare_files=["real.jsonl"]', "grpo.compare_rows=2"])
    with RunDir("runs/grpo", resume=True) as run_dir:
        table = comparison.write_comparison(recipe, run_dir, "runs/sft/checkpoints/step_4", "runs/grpo/checkpoints/step_2")
    every = [f"I adopted kitten number {i}" for i in range(5)]
    assert plays[1] == (every[:2], every)
    assert "### real.jsonl (the first 2 of its 5 messages, all 5 in the judge's pool; base left out)" in table
    saved = json.loads((tmp_path / "runs/grpo/comparison.json").read_text())["compare_files"]["real.jsonl"]
    assert (saved["targets"], saved["pool_rows"]) == (2, 5)


def test_the_comparison_plays_the_senders_under_readers_rl_did_not_train_against(loops, tmp_path, monkeypatch):
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation import comparison
    from emojikit.stages.runs import RunDir

    run_main_job()
    Path("real.jsonl").write_text("".join(json.dumps({"text": f"I adopted kitten number {i}"}) + "\n" for i in range(5)))
    plays = []

    def fake_evaluate(recipe, settings, targets, out_dir, pool=(), **kwargs):
        judge = recipe.components["judge"]
        plays.append((judge.spec.name, judge.config.distractors, list(settings.checkpoints), len(targets)))
        rate = {"keywords": 0.25, "retrieval": 0.5}[judge.spec.name]
        entry = {"masked": {"success_rate": rate, "first_turn_success": rate / 2, "similarity": 0.6, "mean_turns": 1.5, "format_violations": 0.0, "distinct_emoji": 9}, "categories": {}}
        return {"targets": len(targets), "seed": 0, "judge": judge.spec.name, "checkpoints": {c: entry for c in settings.checkpoints}}

    monkeypatch.setattr("emojikit.evaluation.evaluate.evaluate_checkpoints", fake_evaluate)
    recipe = load_recipe("grpo.toml", ["grpo.eval_targets=3", 'grpo.compare_files=["real.jsonl"]', 'judge={ use = "keywords", distractors = 7 }',
                                       'grpo.compare_judges=["retrieval"]'])
    with RunDir("runs/grpo", resume=True) as run_dir:
        table = comparison.write_comparison(recipe, run_dir, "runs/sft/checkpoints/step_4", "runs/grpo/checkpoints/step_2")
    trained = ["base", "runs/sft/checkpoints/step_4", "runs/grpo/checkpoints/step_2", "teacher:lexicon"]
    assert plays == [("keywords", 7, trained, 3), ("keywords", 7, trained[1:], 5), ("retrieval", 7, trained[1:], 3), ("retrieval", 7, trained[1:], 5)]
    summary = table.split("\n\n")[1].splitlines()
    assert "**keywords** (trained): held-out" in summary[0] and "retrieval: real" in summary[0]
    assert summary[2:] == ["| base | 0.250 (0.125) | - | - | - |", "| sft | 0.250 (0.125) | 0.250 (0.125) | 0.500 (0.250) | 0.500 (0.250) |",
                           "| grpo | 0.250 (0.125) | 0.250 (0.125) | 0.500 (0.250) | 0.500 (0.250) |",
                           "| teacher (lexicon) | 0.250 (0.125) | 0.250 (0.125) | 0.500 (0.250) | 0.500 (0.250) |"]
    assert "## Under the `retrieval` judge" in table
    saved = json.loads((tmp_path / "runs/grpo/comparison.json").read_text())
    assert saved["readers"]["retrieval"]["compare_files"]["real.jsonl"]["targets"] == 5


def test_the_comparison_summary_ends_with_grpos_paired_gain_over_its_start():
    from emojikit.evaluation.comparison import summary_markdown

    def played(sft, grpo):
        rate = lambda wins: {"masked": {"success_rate": sum(wins) / len(wins)}, "per_target_success": wins}
        return {"judge": "keywords", "checkpoints": {"sft": rate(sft), "grpo": rate(grpo), "teacher (lexicon)": {"masked": {"success_rate": 1.0}}}}

    results = played([True, False, False, False] * 4, [True, True, True, False] * 4)  # grpo wins 8 more, loses none
    results["compare_files"] = {"real.jsonl": played([True] * 16, [False] * 16)}
    lines = summary_markdown(results, paired=("grpo", "sft")).splitlines()
    (row,) = [line for line in lines if line.startswith("| grpo - sft")]
    assert row == "| grpo - sft, paired (McNemar p) | +50.0 points, p 0.0078 (8 vs 0) | -100.0 points, p 3.1e-05 (0 vs 16) |"
    assert "exact McNemar p" in lines[-1]
    assert not [line for line in summary_markdown(results).splitlines() if "paired" in line]


def test_a_replaying_sender_samples_a_seeded_call_once_and_passes_the_rest_through():
    from emojikit.api.policy import SamplingParams
    from emojikit.evaluation.evaluate import ReplayingSender

    calls = []

    class Counting:
        name = "counting"

        def sample(self, prompts, n, params, decoder=None):
            calls.append((len(prompts), params.seed))
            return [[f"answer {len(calls)}"] * n for _ in prompts]

    sender, decoder = ReplayingSender(Counting()), object()
    prompts = [[{"role": "user", "content": "I adopted a kitten"}]]
    first = sender.sample(prompts, 1, SamplingParams(seed=3), decoder)
    assert sender.sample(prompts, 1, SamplingParams(seed=3), decoder) == first == [["answer 1"]]
    assert sender.sample(prompts, 1, SamplingParams(seed=4), decoder) == [["answer 2"]]      # another seed: sampled
    assert sender.sample(prompts, 1, SamplingParams(seed=3), object()) == [["answer 3"]]     # another decoder: sampled
    assert sender.sample(prompts, 1, SamplingParams(), decoder) == [["answer 4"]]            # no seed: never replayed
    assert sender.sample(prompts, 1, SamplingParams(), decoder) == [["answer 5"]]
    assert len(calls) == 5 and sender.name == "counting"


def test_loaded_senders_play_a_second_reader_as_a_fresh_load_would_sampling_only_its_repairs(tmp_path, tiny_model, monkeypatch):
    from emojikit.api.components import Message
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation.evaluate import EvalSettings, LoadedSenders, evaluate_checkpoints
    from emojikit_local.policy import LocalPolicy

    sampled = []
    real_sample = LocalPolicy.sample
    monkeypatch.setattr(LocalPolicy, "sample", lambda self, prompts, *a, **k: (sampled.append(len(prompts)), real_sample(self, prompts, *a, **k))[1])
    targets = [Message(text=t) for t in ("I adopted a kitten today", "The train to Paris is late again", "We won the final match", "My tooth hurts")]
    settings = EvalSettings(checkpoints=["base"], unmasked=False)
    model = f"backend.model={json.dumps(str(tiny_model))}"

    def reader(name):
        return load_recipe(ROOT / "recipes/eval.toml", [model, f'judge={{ use = "{name}", distractors = 4 }}', "game.max_turns=2", "decoder.max_emoji=3"])

    fresh = {name: evaluate_checkpoints(reader(name), settings, targets, tmp_path, progress=False) for name in ("keywords", "retrieval")}
    sampled.clear()
    loaded = LoadedSenders()
    kept = {name: evaluate_checkpoints(reader(name), settings, targets, tmp_path, progress=False, senders=loaded) for name in ("keywords", "retrieval")}
    for name in kept:  # the same games, turn by turn
        assert kept[name]["checkpoints"]["base"]["per_target"] == fresh[name]["checkpoints"]["base"]["per_target"]
    # One first turn for both readers (from memory the second time), then each reader's repair turn for its misses.
    misses = [sum(ep["n_turns"] == 2 for ep in kept[name]["checkpoints"]["base"]["per_target"]) for name in kept]
    assert all(misses) and sampled == [len(targets)] + misses and list(loaded.senders) == ["base"]


def test_eval_with_several_judges_plays_each_reader_as_alone_and_samples_the_first_turns_once(tmp_path, tiny_model, monkeypatch):
    from emojikit_local.policy import LocalPolicy

    targets = tmp_path / "targets.txt"
    targets.write_text("I adopted a kitten today\nThe train to Paris is late again\nWe won the final match\nMy tooth hurts\n")
    common = ["eval", "--recipe", str(ROOT / "recipes/eval.toml"), "--targets", str(targets), "--checkpoint", "base", "--checkpoint", "teacher:lexicon",
              "--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "game.max_turns=2", "--set", "decoder.max_emoji=3",
              "--set", "judge.distractors=4", "--set", "eval.unmasked=false"]
    alone = {}
    for judge in ("keywords", "retrieval"):
        result = CliRunner().invoke(cli, [*common, "--judge", judge, "--out", str(tmp_path / judge)])
        assert result.exit_code == 0, result.output
        alone[judge] = json.loads((tmp_path / judge / "eval.json").read_text())["checkpoints"]
    sampled = []
    real_sample = LocalPolicy.sample
    monkeypatch.setattr(LocalPolicy, "sample", lambda self, prompts, *a, **k: (sampled.append(len(prompts)), real_sample(self, prompts, *a, **k))[1])
    out = tmp_path / "both"
    result = CliRunner().invoke(cli, [*common, "--judge", "keywords", "--judge", "retrieval", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for judge in alone:  # the same games, turn by turn, as each reader alone
        assert json.loads((out / judge / "eval.json").read_text())["checkpoints"] == alone[judge]
    misses = [sum(ep["n_turns"] == 2 for ep in alone[judge]["base"]["per_target"]) for judge in alone]
    assert all(misses) and sampled == [4] + misses  # base's first turns once, then each reader's repairs
    table = (out / "readers.md").read_text()
    assert "| checkpoint | `keywords` | `retrieval` |" in table
    teacher = [alone[judge]["teacher:lexicon"]["masked"] for judge in alone]
    assert f"| teacher:lexicon | {teacher[0]['success_rate']:.3f} ({teacher[0]['first_turn_success']:.3f}) | {teacher[1]['success_rate']:.3f}" in table
    result = CliRunner().invoke(cli, [*common, "--judge", "keywords", "--judge", "keywords", "--out", str(tmp_path / "twice")])
    assert result.exit_code == 2 and "--judge: each reader once (keywords, keywords)" in result.output and not (tmp_path / "twice").exists()


def test_an_unknown_compare_judge_fails_before_training(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    result = CliRunner().invoke(cli, ["validate", "recipes/grpo.toml", "--set", 'grpo.compare_judges=["retrieval", "nosuch"]'])
    assert result.exit_code == 2 and "[grpo] compare_judges: no judge named 'nosuch'" in result.output and "Traceback" not in result.output


def test_evaluate_checkpoints_puts_the_pool_rows_in_the_judges_candidates(tmp_path, monkeypatch):
    from emojikit.api.components import Message
    from emojikit.composition.recipe import load_recipe
    from emojikit.evaluation import evaluate
    from emojikit.evaluation.evaluate import EvalSettings, evaluate_checkpoints

    judges = []
    add = evaluate.add_candidates
    monkeypatch.setattr(evaluate, "add_candidates", lambda judge, texts: (judges.append(judge), add(judge, texts)))
    recipe = load_recipe(ROOT / "recipes/eval.toml", ["judge.distractors=0", "game.max_turns=1"])
    played = [Message(text="I adopted a kitten today")]
    results = evaluate_checkpoints(recipe, EvalSettings(checkpoints=["teacher:lexicon"]), played, tmp_path, progress=False,
                                   pool=["The train to Paris is late again", "I adopted a kitten today"])
    (judge,) = judges
    assert judge.candidates == ["I adopted a kitten today", "The train to Paris is late again"]
    assert results["targets"] == 1 and len(results["checkpoints"]["teacher:lexicon"]["per_target"]) == 1


# --- kill -9 during SFT, then the same command ---------------------------------------------------

FAKE_MAIN = """
import sys, time
import emojikit.training.data, emojikit.training.sft, emojikit.training.grpo
from emojikit.ui.cli import main

class Policy:
    def load(self, path):
        pass

def data(recipe, run_dir):
    rows = ''.join('{"messages": [{"role": "user", "content": "m%d"}, {"role": "assistant", "content": "🍕🎉"}]}\\n' % i for i in range(4))
    run_dir.file("sft_train.jsonl").write_text(rows)
    run_dir.file("sft_test.jsonl").write_text(rows)

def loop(kind, seconds):
    def run(recipe, run_dir):
        settings = recipe.settings[kind]
        start = run_dir.resume_policy(Policy(), ("metrics.jsonl",))
        print(f"{kind} starts at step {start}", flush=True)
        for step in range(start + 1, settings.steps + 1):
            time.sleep(seconds)
            run_dir.log("metrics.jsonl", {"step": step})
            if step % 2 == 0 or step == settings.steps:
                with run_dir.new_checkpoint(step) as tmp:
                    (tmp / "fake_weights.txt").write_text(str(step))
    return run

emojikit.training.data.run, emojikit.training.sft.run, emojikit.training.grpo.run = data, loop("sft", 0.15), loop("grpo", 0.0)
sys.argv = ["emojikit", "run", *sys.argv[1:]]
main()
"""


def test_kill_9_during_sft_then_the_same_command_resumes_it_and_goes_on(tmp_path):
    (tmp_path / "data.toml").write_text(DATA, encoding="utf-8")
    (tmp_path / "sft.toml").write_text(SFT.format(steps=12), encoding="utf-8")
    (tmp_path / "grpo.toml").write_text(GRPO, encoding="utf-8")
    (tmp_path / "fake_main.py").write_text(FAKE_MAIN, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    metrics = tmp_path / "runs/sft/metrics.jsonl"

    def complete_steps() -> list[int]:
        text = metrics.read_text() if metrics.exists() else ""
        return [json.loads(line)["step"] for line in text.splitlines(keepends=True) if line.endswith("\n")]

    first = subprocess.Popen([sys.executable, "fake_main.py", "grpo.toml"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while len(complete_steps()) < 5:
        assert first.poll() is None and time.monotonic() < deadline, first.stdout.read().decode()
        time.sleep(0.02)
    first.send_signal(signal.SIGKILL)
    first.wait(30)
    first.stdout.close()
    assert json.loads((tmp_path / "runs/sft/stage.json").read_text())["status"] == "running"

    second = subprocess.run([sys.executable, "fake_main.py", "grpo.toml"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert second.returncode == 0, second.stdout + second.stderr
    lines = second.stdout.splitlines()
    assert lines[0].startswith("stage 1/3: data (data.toml) reuse runs/data: finished run")
    assert any(line.startswith("stage 2/3: sft (sft.toml) resume runs/sft: interrupted at step_") for line in lines)
    resumed_at = int(next(line for line in lines if line.startswith("sft starts at step")).split()[-1])
    assert resumed_at >= 4  # not from step 0
    assert complete_steps() == list(range(1, 13))  # contiguous, each step once
    assert "grpo starts at step 0" in second.stdout
    assert json.loads((tmp_path / "runs/grpo/stage.json").read_text())["status"] == "finished"
