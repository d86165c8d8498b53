"""Newcomer problems of the CLI (issue 43), each fixed and held here: `emojikit` alone prints
the command list; a recipe's relative paths work from any directory (the current directory
first, then the recipe's project root); `play` says who won, out of how many candidates, and
keeps the details in --json; and one-line errors that say what is wrong and nothing misleading
(a data run as a checkpoint, a missing file of one's own, a key without its table, a value of
the wrong type, a table of another kind of recipe, a damaged checkpoint before the first game,
--export naming a directory). Nothing here trains or loads a model."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from emojikit import Component, ConfigModel, Episode, hookimpl
from emojikit.api.components import EpisodeTurn
from emojikit.api.errors import ConfigError, OutputError
from emojikit.api.policy import Sample
from emojikit.composition import registry as registry_mod
from emojikit.composition.recipe import load_recipe, project_root
from emojikit.composition.registry import Registry
from emojikit.ui.cli import cli
from emojikit.ui.interactive import judge_line, result_line

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


def one_line_error(result, *fragments) -> str:
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.strip().splitlines() if "UserWarning" not in line and "load_entrypoints" not in line]
    assert len(lines) == 1 and lines[0].startswith("emojikit: error: "), result.stderr
    assert "Traceback" not in result.output
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


def chat(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"news number {i}"}, {"role": "assistant", "content": "🍕🎉"}]}


def write_chats(path: Path, rows: range) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(chat(i)) + "\n" for i in rows), encoding="utf-8")
    return path


# --- 1. `emojikit` alone ------------------------------------------------------------------------


def test_no_arguments_prints_the_usage_and_the_command_list_then_exits_2():
    result = CliRunner().invoke(cli, [], prog_name="emojikit")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0].startswith("Usage: emojikit [OPTIONS] COMMAND")
    assert "Commands:" in lines
    for name in cli.commands:  # one command per line, readable, not squashed into an error line
        assert any(line.strip().startswith(name + " ") for line in lines), name
    assert lines[-1].startswith("emojikit: error: missing command")
    assert sum(line.startswith("emojikit: error:") for line in lines) == 1
    assert result.stdout == ""  # stdout stays clean for pipes, as argparse does


def test_no_arguments_as_a_process():
    done = subprocess.run([sys.executable, "-m", "emojikit.ui.cli"], capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("Usage: emojikit ") and "\nCommands:\n" in done.stderr
    assert done.stderr.rstrip().splitlines()[-1].startswith("emojikit: error: missing command")


def test_help_is_still_exit_0_on_stdout():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0 and "Commands:" in result.stdout


# --- 2. relative paths in a recipe --------------------------------------------------------------


def test_project_root_is_the_folder_holding_recipes(tmp_path):
    assert project_root(RECIPES / "sft.toml") == REPO
    assert project_root(tmp_path / "mine.toml") == tmp_path


@pytest.mark.parametrize("name", ["grpo.toml", "eval.toml", "data.toml", "rft.toml"])
def test_a_shipped_recipe_validates_from_another_directory(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("validate", RECIPES / name)
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"{RECIPES / name}: ok (")
    assert not (tmp_path / "runs").exists()


def test_sft_recipe_validates_from_another_directory_and_says_its_data_comes_first(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("validate", RECIPES / "sft.toml")
    assert result.exit_code == 0, result.output
    assert f"come from {RECIPES / 'data.toml'}, which has no finished run yet" in result.stdout
    assert "is not a recipe file" not in result.output


def test_shipped_recipe_paths_resolve_against_the_repo_from_elsewhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    s = load_recipe(RECIPES / "grpo.toml").settings["grpo"]
    assert s.start_from == str(REPO / "recipes/sft.toml")
    assert s.heldout_file == REPO / "recipes/targets/heldout.jsonl"
    assert s.compare_files == [REPO / "recipes/targets/real-texts.jsonl"]
    assert load_recipe(RECIPES / "sft.toml").settings["sft"].data == REPO / "recipes/data.toml"


def test_from_the_repo_root_the_written_paths_stay_as_written(monkeypatch):
    monkeypatch.chdir(REPO)
    s = load_recipe(RECIPES / "grpo.toml").settings["grpo"]
    assert s.start_from == "recipes/sft.toml" and s.heldout_file == Path("recipes/targets/heldout.jsonl")


def project(tmp_path: Path) -> tuple[Path, Path]:
    """A project with recipes/s.toml naming data/train.jsonl and data/test.jsonl (made under
    the project root), and an empty working directory elsewhere."""
    proj, work = tmp_path / "proj", tmp_path / "work"
    write_chats(proj / "data/train.jsonl", range(4))
    write_chats(proj / "data/test.jsonl", range(4, 6))
    (proj / "recipes").mkdir()
    (proj / "recipes/s.toml").write_text(
        'kind = "sft"\nout = "run"\n[backend]\nuse = "local"\n[sft]\ntrain_file = "data/train.jsonl"\ntest_file = "data/test.jsonl"\n', encoding="utf-8"
    )
    work.mkdir()
    return proj, work


def test_a_loop_table_path_is_found_under_the_project_root(tmp_path, monkeypatch):
    proj, work = project(tmp_path)
    monkeypatch.chdir(work)
    s = load_recipe(proj / "recipes/s.toml").settings["sft"]
    assert s.train_file == proj / "data/train.jsonl" and s.test_file == proj / "data/test.jsonl"
    assert invoke("validate", proj / "recipes/s.toml").exit_code == 0


def test_the_current_directory_comes_first(tmp_path, monkeypatch):
    proj, work = project(tmp_path)
    write_chats(work / "data/train.jsonl", range(10, 14))
    monkeypatch.chdir(work)
    s = load_recipe(proj / "recipes/s.toml").settings["sft"]
    assert s.train_file == Path("data/train.jsonl")  # as written: the current directory has it
    assert s.test_file == proj / "data/test.jsonl"  # only the project root has it


def test_a_path_found_nowhere_says_where_it_was_looked_for(tmp_path, monkeypatch):
    proj, work = project(tmp_path)
    (proj / "data/train.jsonl").unlink()
    monkeypatch.chdir(work)
    line = one_line_error(invoke("validate", proj / "recipes/s.toml"), "[sft] train_file: file not found: data/train.jsonl")
    assert f"looked for at {work / 'data/train.jsonl'} (the current directory) and at {proj / 'data/train.jsonl'} (the recipe's project root)" in line
    assert "make it with" not in line  # a file of one's own: emojikit run recipes/data.toml would not make it


def test_a_component_path_and_a_nested_one_resolve_too(tmp_path, monkeypatch):
    proj, work = tmp_path / "proj", tmp_path / "work"
    (proj / "recipes").mkdir(parents=True)
    work.mkdir()
    (proj / "msgs.jsonl").write_text("".join(json.dumps({"text": f"message number {i}"}) + "\n" for i in range(6)), encoding="utf-8")
    teacher = '[teacher]\nuse = "lexicon"\n'
    (proj / "recipes/d.toml").write_text(f'kind = "data"\n[prompts]\nuse = "jsonl"\npath = "msgs.jsonl"\n{teacher}', encoding="utf-8")
    (proj / "recipes/m.toml").write_text(f'kind = "data"\n[prompts]\nuse = "mix"\n[[prompts.sources]]\nuse = "jsonl"\npath = "msgs.jsonl"\n{teacher}', encoding="utf-8")
    monkeypatch.chdir(work)
    assert Path(load_recipe(proj / "recipes/d.toml").components["prompts"].config.path) == proj / "msgs.jsonl"
    assert load_recipe(proj / "recipes/m.toml").data["prompts"]["sources"][0]["path"] == str(proj / "msgs.jsonl")


def test_a_path_given_with_set_is_relative_to_the_current_directory_only(tmp_path, monkeypatch):
    proj, work = project(tmp_path)
    monkeypatch.chdir(work)
    with pytest.raises(ConfigError, match=r"\[sft\] train_file: file not found: data/test.jsonl"):
        load_recipe(proj / "recipes/s.toml", ['sft.train_file="data/test.jsonl"'])


# --- 3. play says who won, and out of how many ---------------------------------------------------


class PoolJudge:
    """A pool judge that never repeats a guess and knows nothing: it guesses the pool in order."""

    repeat_guesses = False

    def __init__(self, others):
        self.candidates = list(others)

    def add_candidates(self, texts):
        self.candidates += [t for t in texts if t not in self.candidates]

    def guess(self, views):
        return [next((c for c in self.candidates if c not in v.guesses), "") for v in views]


class ExactReward:
    success_threshold = 0.8

    def similarity(self, targets, guesses):
        return [1.0 if t == g else 0.1 for t, g in zip(targets, guesses)]

    def score(self, episodes):
        return [{"similarity": ep.turns[-1].similarity, "success_bonus": 1.0 if ep.success else 0.0,
                 "total": ep.turns[-1].similarity + (1.0 if ep.success else 0.0) - 0.05 * len(ep.turns)} for ep in episodes]


class ScriptedPolicy:
    """A Policy at the game's boundary: the same emoji for every prompt."""

    name = "scripted"

    def sample(self, prompts, n, params, decoder=None):
        return [[Sample(prompt_tokens=[1], tokens=[2, 3], logprobs=[-0.1, -0.1], text="😇💡💡")] for _ in prompts]

    def __getattr__(self, name):  # the rest of the Policy protocol, unused here
        if name in ("encode_prompt", "encode_completion", "decode", "compute_logprobs", "forward_backward", "optim_step", "save", "load"):
            return lambda *a, **k: None
        raise AttributeError(name)


@pytest.fixture
def scripted(monkeypatch, tmp_path):
    """The default registry plus a scripted sender, a one-other-message pool judge and an exact reward."""

    class Plugin:
        @hookimpl
        def register_backends(self):
            return [Component("scripted", "A scripted sender.", ConfigModel, lambda cfg, ctx: ScriptedPolicy())]

        @hookimpl
        def register_judges(self):
            return [Component("tiny-pool", "One other message.", ConfigModel, lambda cfg, ctx: PoolJudge(["Party again?!"]))]

        @hookimpl
        def register_rewards(self):
            return [Component("exact", "1 for the target.", ConfigModel, lambda cfg, ctx: ExactReward())]

    reg = Registry()
    reg.register(Plugin(), "scripted")
    monkeypatch.setattr(registry_mod, "_default", reg)
    monkeypatch.chdir(tmp_path)  # no recipes/grpo.toml here: each component's defaults and the flags
    return ["play", "--backend", "scripted", "--decoder", "none", "--judge", "tiny-pool", "--reward", "exact",
            "--checkpoint", "base", "--max-turns", "2", "--seed", "0", "--message", "I got promoted and can't stop smiling"]


def test_play_says_who_won_out_of_how_many_and_no_reward_dump(scripted):
    result = invoke(*scripted)
    assert result.exit_code == 0, result.output
    out = result.stdout
    # The untrained sender "wins" on turn 2 only because the judge never repeats its turn-1 guess
    # in a pool of two: the lines say so instead of a bare "success".
    assert "judge    tiny-pool picks its guess from 2 messages: yours and 1 other, never the same one twice" in out
    (result_row,) = [line for line in out.splitlines() if line.startswith("result")]
    assert result_row == "result   won on turn 2 of 2: the judge picked your message out of 2 candidates; reward 1.90"
    assert "success_bonus" not in out and "listener" not in out


def test_play_json_keeps_every_detail(scripted):
    result = invoke(*scripted, "--json")
    assert result.exit_code == 0, result.output
    row = json.loads(result.stdout)
    assert row["candidates"] == 2 and row["judge"] == "tiny-pool" and row["success"] is True and row["n_turns"] == 2
    assert row["reward"] == {"similarity": 1.0, "success_bonus": 1.0, "total": 1.9}
    assert [t["guess"] for t in row["turns"]] == ["Party again?!", "I got promoted and can't stop smiling"]


def test_result_line_of_a_miss_and_of_a_free_text_judge():
    miss = Episode(target="see you at the beach", turns=[EpisodeTurn(emoji="🌊", valid=True, guess="swim later", similarity=0.41)],
                   reward={"total": -0.2, "turn_penalty": 0.05})
    assert result_line(miss, 2, 0.85, 129) == 'result   not guessed in 1 turn: the closest guess was "swim later" (similarity 0.41, success at 0.85); reward -0.20'
    won = Episode(target="see you at the beach", success=True, turns=[EpisodeTurn(emoji="🏖️", valid=True, guess="meet me at the beach", similarity=0.9)])
    assert result_line(won, 3, 0.85, None) == 'result   won on turn 1 of 3: the judge guessed "meet me at the beach" (similarity 0.90, success at 0.85)'
    assert judge_line("claude", object()) == "judge    claude writes its guess freely (no list of candidates)"


# --- 4. one-line errors that say what is wrong ------------------------------------------------------


def data_run(root: Path) -> Path:
    run = root / "runs" / "data"
    run.mkdir(parents=True)
    (run / "recipe.toml").write_text('kind = "data"\nname = "data"\n', encoding="utf-8")
    (run / "stage.json").write_text(json.dumps({"fingerprint": "0" * 64, "status": "finished", "kind": "data"}), encoding="utf-8")
    write_chats(run / "sft_train.jsonl", range(3))
    return run


@pytest.mark.parametrize("command", [["chat"], ["play", "--message", "hello"], ["eval-sft", "--recipe", RECIPES / "sft.toml"],
                                     ["eval", "--recipe", RECIPES / "eval.toml"]])
def test_a_data_run_as_checkpoint_is_named_as_one(command, tmp_path, monkeypatch):
    data_run(tmp_path)
    monkeypatch.chdir(tmp_path)
    line = one_line_error(invoke(*command, "--checkpoint", "runs/data", input="hi\n"),
                          "--checkpoint runs/data: a data run directory, not a training run", "checkpoints come from sft, grpo and rft runs")
    assert "without a checkpoint (no checkpoints/step_N yet)" not in line  # it will never have one


def test_an_eval_run_as_checkpoint_reads_an_eval_run(tmp_path):
    from emojikit.stages.runs import not_a_sender_run

    run = tmp_path / "runs" / "eval"
    run.mkdir(parents=True)
    (run / "recipe.toml").write_text('kind = "eval"\nname = "eval"\n', encoding="utf-8")
    (run / "stage.json").write_text(json.dumps({"fingerprint": "0" * 64, "status": "finished", "kind": "eval"}), encoding="utf-8")
    assert f"{run}: an eval run directory, not a training run" in not_a_sender_run(str(run))


def test_eval_finds_its_default_recipe_from_any_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no recipes/ here: the checkout's recipes/eval.toml, the outputs here
    (tmp_path / "mine.txt").write_text("I got promoted today\nThe cat is asleep on my keyboard\n", encoding="utf-8")
    result = invoke("eval", "--checkpoint", "teacher:lexicon", "--targets", "mine.txt", "--out", "out")
    assert result.exit_code == 0, result.output
    assert "Held-out retrieval game: 2 targets" in result.output and (tmp_path / "out" / "eval.json").is_file()


def test_own_train_file_missing_is_not_told_to_run_the_data_recipe(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    line = one_line_error(invoke("validate", RECIPES / "sft.toml", "--set", f'sft.train_file="{tmp_path}/mine.jsonl"',
                                 "--set", f'sft.test_file="{write_chats(tmp_path / "t.jsonl", range(2))}"'),
                          f"[sft] train_file: file not found: {tmp_path}/mine.jsonl")
    assert "make it with" not in line
    relative = one_line_error(invoke("validate", RECIPES / "sft.toml", "--set", 'sft.train_file="no-such-mine.jsonl"',
                                     "--set", f'sft.test_file="{tmp_path / "t.jsonl"}"'), "file not found: no-such-mine.jsonl")
    assert f"looked for at {REPO / 'no-such-mine.jsonl'}" in relative and "make it with" not in relative


def test_default_data_file_missing_still_says_how_to_make_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.toml").write_text('kind = "sft"\n[backend]\nuse = "local"\n[sft]\ntrain_file = "runs/data/sft_train.jsonl"\ntest_file = "runs/data/sft_test.jsonl"\n')
    one_line_error(invoke("validate", "s.toml"), "[sft] train_file: file not found: runs/data/sft_train.jsonl (make it with: emojikit run recipes/data.toml)")


def test_a_key_without_its_table_names_the_tables_that_have_it():
    line = one_line_error(invoke("validate", RECIPES / "grpo.toml", "--set", "learning_rate=1e-4"), "learning_rate: not a top-level key",
                          "did you mean grpo.learning_rate?")
    assert "[learning_rate]: not used by" not in line
    one_line_error(invoke("validate", RECIPES / "sft.toml", "--set", "learning_rate=1e-4"), "did you mean sft.learning_rate?")
    one_line_error(invoke("validate", RECIPES / "grpo.toml", "--set", "lerning_rate=1e-4"), "(did you mean grpo.learning_rate?)")


@pytest.mark.parametrize("setting, message", [
    ("grpo.steps=ten", "[grpo] steps: expected an integer, got 'ten'"),
    ("grpo.clip=abc", "[grpo] clip: expected a number, got 'abc'"),
    ("grpo.compare=maybe", "[grpo] compare: expected true or false, got 'maybe'"),
    ("grpo.loss=foo", "[grpo] loss: expected one of 'ppo' or 'importance_sampling', got 'foo'"),
    ("grpo.steps=0", "[grpo] steps: must be greater than or equal to 1, got 0"),
    ("judge.distractors=many", "[judge] distractors: expected an integer, got 'many'"),
])
def test_a_wrong_type_is_one_plain_line(setting, message):
    line = one_line_error(invoke("validate", RECIPES / "grpo.toml", "--set", setting), f"grpo.toml: {message}")
    assert "Input should" not in line and "unable to parse" not in line


@pytest.mark.parametrize("args, message", [
    (["validate", RECIPES / "grpo.toml", "--set", "grpo.steps=ten"], "[grpo] steps: expected an integer, got 'ten' (from --set grpo.steps)"),
    (["validate", RECIPES / "grpo.toml", "--set", "seed=x"], "seed: expected an integer, got 'x' (from --set seed)"),
    (["eval", "--recipe", RECIPES / "eval.toml", "--checkpoint", "runs/nowhere"],
     "[eval] checkpoints: runs/nowhere is not a checkpoint directory (no such folder); give a checkpoint or run directory, base or teacher:NAME (from --checkpoint)"),
    (["eval", "--recipe", RECIPES / "eval.toml", "--targets", "missing.jsonl", "--checkpoint", "base"], "[eval] targets_file: file not found: missing.jsonl (from --targets)"),
    (["eval", "--recipe", RECIPES / "eval.toml", "--judge", "nope", "--checkpoint", "base"], "[judge] use: no judge named 'nope'; installed: "),
    (["play", "--message", "hi", "--checkpoint", "base", "--judge", "keywords", "--set", "judge.pool_sizee=3"],
     "[judge] pool_sizee: unknown key (did you mean 'pool_file'?) (from --set judge.pool_sizee)"),
    (["chat", "--checkpoint", "base", "--set", "decoder.max_emoji=x"], "[decoder] max_emoji: expected an integer, got 'x' (from --set decoder.max_emoji)"),
])
def test_an_error_about_a_value_a_flag_set_names_the_flag(args, message, tmp_path, monkeypatch):
    # The recipe file is named first (where the rest came from), the flag the user typed last.
    monkeypatch.chdir(tmp_path)
    line = one_line_error(invoke(*args, input="hi\n"), message)
    if "'nope'" in message:
        assert line.endswith("(from --judge nope)")


def test_name_flags_reads_every_shape_of_an_error_line():
    from emojikit.composition.recipe import flag_sources, name_flags

    sources = flag_sources(["sft.steps=3", "prompts={ use = 'mix' }", "kind=x"], {"judge": "claude"}, {"eval": {"checkpoints": ["a"]}},
                           {"eval.checkpoints": "--checkpoint"})
    lines = ["[sft]: not used by an eval recipe", "[prompts.sources[0]] splitt: unknown key", "[judge] the claude judge needs an API key",
             "kind: 'x' is not a recipe kind", "[eval] checkpoints: a is not a checkpoint directory", "[grpo] steps: expected an integer",
             "[eval] temperature: too high; [judge] api_key: unknown key"]
    assert name_flags(lines, sources) == [
        "[sft]: not used by an eval recipe (from --set sft.steps)", "[prompts.sources[0]] splitt: unknown key (from --set prompts)",
        "[judge] the claude judge needs an API key (from --judge claude)", "kind: 'x' is not a recipe kind (from --set kind)",
        "[eval] checkpoints: a is not a checkpoint directory (from --checkpoint)", "[grpo] steps: expected an integer",
        "[eval] temperature: too high", "[judge] api_key: unknown key (from --judge claude)"]


def test_an_override_the_command_adds_is_not_blamed_on_the_user():
    # `run` points a stage at its upstream's output with --set values of its own (`typed` are the user's).
    with pytest.raises(ConfigError) as caught:
        load_recipe(RECIPES / "sft.toml", ["sft.steps=ten", "sft.epochs=x"], typed=["sft.steps=ten"])
    assert "[sft] steps: expected an integer, got 'ten' (from --set sft.steps)" in str(caught.value)
    assert "[sft] epochs: expected an integer, got 'x'" in str(caught.value) and "(from --set sft.epochs)" not in str(caught.value)


def test_a_recipe_value_is_not_blamed_on_a_flag_and_a_secret_set_is_not_echoed(tmp_path, monkeypatch):
    recipe = tmp_path / "bad.toml"
    recipe.write_text((RECIPES / "eval.toml").read_text(encoding="utf-8").replace("[eval]", "[eval]\nbogus = 1", 1), encoding="utf-8")
    line = one_line_error(invoke("validate", recipe, "--set", "judge.api_key=sk-ant-secret123", "--set", "judge.api-key=sk-ant-secret123", "--set", "judge.use=claude"),
                          "[eval] bogus: unknown key", "[judge] api_key: unknown key (from --set judge.api_key)")
    assert "[eval] bogus: unknown key (from" not in line and "sk-ant-secret123" not in line


def test_a_table_of_another_kind_of_recipe_points_where_it_goes(monkeypatch):
    monkeypatch.chdir(REPO)
    one_line_error(invoke("validate", "recipes/grpo.toml", "--set", "sft.steps=3"),
                   "[sft]: not used by a grpo recipe (SFT settings go in the sft recipe that [grpo] start_from names: recipes/sft.toml)")
    one_line_error(invoke("validate", "recipes/grpo.toml", "--set", "grpo.start_from=base", "--set", "sft.steps=3"),
                   "(SFT settings go in an sft recipe, e.g. recipes/sft.toml)")
    one_line_error(invoke("validate", "recipes/sft.toml", "--set", "data.count=10"),
                   "[data]: not used by an sft recipe (data settings go in the data recipe that [sft] data names: recipes/data.toml)")


def truncated_checkpoint(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "adapter_config.json").write_text(json.dumps({"peft_type": "LORA"}), encoding="utf-8")
    header = json.dumps({"w": {"dtype": "F32", "shape": [4, 4], "data_offsets": [0, 64]}}).encode()
    (path / "adapter_model.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + b"\0" * 10)  # 54 bytes short
    return path


def test_eval_names_a_damaged_checkpoint_before_the_first_game(tmp_path, monkeypatch):
    import emojikit.evaluation.evaluate as evaluate

    checkpoint = truncated_checkpoint(tmp_path / "runs/sft/checkpoints/step_3")
    monkeypatch.chdir(tmp_path)

    def no_games(*args, **kwargs):
        raise AssertionError("a game was played before the damaged checkpoint was named")

    monkeypatch.setattr(evaluate, "evaluate_checkpoints", no_games)
    line = one_line_error(invoke("eval", "--recipe", RECIPES / "eval.toml", "--checkpoint", "base", "--checkpoint", "runs/sft", "--out", "report", "-n", 2),
                          "[eval] checkpoints: ", "adapter_model.safetensors: truncated")
    assert str(checkpoint.relative_to(tmp_path)) in line
    assert not (tmp_path / "report").exists()  # before the report directory, before any model


def test_mask_export_to_a_directory_names_that_directory(tmp_path):
    folder = tmp_path / "masks"
    folder.mkdir()
    line = one_line_error(invoke("mask", "--export", folder), f"--export {folder}: is a directory, expected a file to write")
    assert ".tmp" not in line
    assert list(tmp_path.iterdir()) == [folder] and not any(folder.iterdir())


def test_the_mask_writer_names_the_path_asked_for_not_its_temporary_file(tmp_path):
    from emojikit_emoji_mask.export import save_npz

    folder = tmp_path / "masks"
    folder.mkdir()
    with pytest.raises(OutputError) as err:
        save_npz(folder, {"a": np.zeros(2)})
    assert str(err.value).startswith(f"{folder}: is a directory") and ".tmp" not in str(err.value)
    assert sorted(os.listdir(tmp_path)) == ["masks"]  # no temporary file left beside it
