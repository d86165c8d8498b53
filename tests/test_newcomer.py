"""What a newcomer hit, each fixed and held here: loop tables in `describe`, code defaults that
are the tuned recipe's, peers' setting names, run directories wherever a checkpoint goes, one
line instead of a traceback for a wrong model, quiet model loads, every spelling of a kind,
the smoke chain, and a set-up stamp that notices a moved clone."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.api.errors import InputFileError
from emojikit.composition.recipe import RECIPE_SHAPES, import_object, load_recipe
from emojikit.stages.runs import resolve_checkpoint, trained_senders
from emojikit.ui.cli import cli, loop_tables

REPO = Path(__file__).resolve().parent.parent
RECIPES = REPO / "recipes"


def invoke(*args, input=None):
    return CliRunner().invoke(cli, [str(a) for a in args], input=input, catch_exceptions=False)


def one_line_error(result, *fragments):
    assert result.exit_code == 2, result.output
    lines = [line for line in result.stderr.strip().splitlines() if "UserWarning" not in line and "load_entrypoints" not in line]
    assert len(lines) == 1 and lines[0].startswith("emojikit: error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]
    return lines[0]


# --- describe covers the loop tables ---------------------------------------------------------


def test_every_loop_setting_has_a_description():
    for table, (ref, _) in loop_tables().items():
        model = import_object(ref)
        missing = [name for name, field in model.model_fields.items() if not field.description]
        assert not missing, f"[{table}] fields without a description: {missing}"


@pytest.mark.parametrize("table", ["grpo", "sft", "game", "data", "eval"])
def test_describe_prints_every_key_of_a_loop_table(table):
    ref = {t: r for shape in RECIPE_SHAPES.values() for t, r in shape["settings"].items()}[table]
    model = import_object(ref)
    for args in ([table], [table, "settings"], [f"[{table}]"]):
        result = invoke("describe", *args)
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(f"[{table}] in ")
        for name, field in model.model_fields.items():
            assert f"\n  {name}: " in result.stdout
            assert field.description.splitlines()[0] in result.stdout


def test_describe_grpo_shows_the_tuned_defaults():
    out = invoke("describe", "grpo", "settings").stdout
    assert "  normalize_std: true or false = false" in out and "  kl_coef: number, >= 0 = 0.05" in out


def test_describe_a_table_with_a_component_name_or_an_unknown_word_is_one_line():
    one_line_error(invoke("describe", "grpo", "retrieval"), "[grpo] is a recipe table", "emojikit describe grpo")
    one_line_error(invoke("describe", "grpos"), "neither a component kind nor a recipe table", "tables: data, sft, grpo")


# --- every spelling of a kind, one printed form ------------------------------------------------


@pytest.mark.parametrize("spelling", ["prompt_source", "prompt-source", "prompt source", "Prompt Source"])
def test_every_spelling_of_a_kind_is_accepted_and_printed_canonically(spelling):
    listed = invoke("list-plugins", "--kind", spelling)
    assert listed.exit_code == 0, listed.output
    rows = listed.stdout.strip().splitlines()
    assert rows and all(row.startswith("prompt_source ") for row in rows)
    described = invoke("describe", spelling, "generated")
    assert described.exit_code == 0 and described.stdout.startswith("prompt_source generated: ")
    components = invoke("describe", spelling)
    assert "generated" in components.stdout and "emojikit describe prompt_source NAME" in components.stdout


def test_a_misspelled_kind_lists_the_canonical_kinds():
    line = one_line_error(invoke("list-plugins", "--kind", "judges"), "did you mean 'judge'?", "kinds: prompt_source, teacher")
    assert "prompt-source" not in line


# --- code defaults are the measured best --------------------------------------------------------


def recipe_table(name: str, table: str) -> dict:
    return tomllib.loads((RECIPES / name).read_text(encoding="utf-8"))[table]


def test_grpo_code_defaults_are_the_shipped_recipes_tuned_values():
    from emojikit.training.grpo import GRPOSettings

    tuned = recipe_table("grpo.toml", "grpo")
    defaults = GRPOSettings()
    for key in ("steps", "batch_size", "group_size", "learning_rate", "temperature", "kl_coef", "normalize_std", "credit", "loss", "clip"):
        assert getattr(defaults, key) == tuned[key], f"[grpo] {key}: code default {getattr(defaults, key)!r}, recipes/grpo.toml {tuned[key]!r}"


def test_sft_code_defaults_are_the_shipped_recipes_tuned_values():
    from emojikit.training.sft import SFTSettings

    tuned = recipe_table("sft.toml", "sft")
    defaults = SFTSettings()
    for key in ("batch_size", "learning_rate", "lr_schedule", "warmup_steps", "max_new_tokens"):
        assert getattr(defaults, key) == tuned[key], f"[sft] {key}: code default {getattr(defaults, key)!r}, recipes/sft.toml {tuned[key]!r}"


# --- peers' names for settings --------------------------------------------------------------------


@pytest.mark.parametrize(
    "setting, hint",
    [
        ("grpo.lr=1e-4", "[grpo] lr: unknown key (did you mean 'learning_rate'? `lr` is"),
        ("grpo.beta=0.1", "[grpo] beta: unknown key (did you mean 'kl_coef'? `beta` is TRL's name)"),
        ("grpo.num_generations=8", "[grpo] num_generations: unknown key (did you mean 'group_size'? `num_generations` is TRL's name)"),
        ("grpo.kl=0.1", "[grpo] kl: unknown key (did you mean 'kl_coef'?"),
        ("grpo.max_steps=3", "[grpo] max_steps: unknown key (did you mean 'steps'?"),
        ("backend.r=8", "[backend] r: unknown key (did you mean 'lora_rank'?"),
    ],
)
def test_a_peers_setting_name_is_answered_with_emojikits(setting, hint):
    one_line_error(invoke("validate", RECIPES / "grpo.toml", "--set", "grpo.start_from=base", "--set", setting), hint)


def test_a_peers_setting_name_in_a_toml_file_gets_the_same_hint(tmp_path):
    text = (RECIPES / "sft.toml").read_text(encoding="utf-8").replace("learning_rate = 3e-3", "lr = 3e-3")
    text = text.replace('data = "recipes/data.toml"', f'train_file = "{tmp_path}/t.jsonl"')
    path = tmp_path / "mine.toml"
    path.write_text(text, encoding="utf-8")
    one_line_error(invoke("validate", path), "mine.toml", "[sft] lr: unknown key (did you mean 'learning_rate'?")


# --- run directories wherever a checkpoint goes -----------------------------------------------------


@pytest.fixture(scope="module")
def trained_runs(tiny_model, tmp_path_factory) -> Path:
    """runs/sft and runs/grpo, each with checkpoints saved by the real local backend on the tiny
    model (grpo's newer), plus a data run that holds no checkpoint."""
    import torch

    from emojikit.api.components import BuildContext
    from emojikit.composition.registry import get_registry

    torch.set_num_threads(1)
    spec = get_registry().get("backend", "local")
    policy = spec.factory(spec.config(model=str(tiny_model)), BuildContext(seed=0))
    root = tmp_path_factory.mktemp("clone")
    for run, steps in (("sft", (4, 12)), ("grpo", (2, 8))):
        for step in steps:
            policy.save(str(root / "runs" / run / "checkpoints" / f"step_{step}"), with_optimizer=False)
        (root / "runs" / run / "stage.json").write_text(json.dumps({"kind": run, "fingerprint": "x", "status": "finished"}))
    (root / "runs" / "data").mkdir()
    (root / "runs" / "data" / "stage.json").write_text(json.dumps({"kind": "data", "fingerprint": "y", "status": "finished"}))
    newer = root / "runs" / "grpo" / "checkpoints" / "step_8"
    os.utime(newer, (newer.stat().st_atime, newer.stat().st_mtime + 60))
    return root / "runs"


def test_a_run_directory_resolves_to_its_final_checkpoint(trained_runs):
    assert resolve_checkpoint(str(trained_runs / "sft")) == str(trained_runs / "sft/checkpoints/step_12")
    assert resolve_checkpoint(str(trained_runs / "sft/checkpoints/step_4")) == str(trained_runs / "sft/checkpoints/step_4")
    for ref in ("base", "auto", "teacher:lexicon", "tinker://run/state", "recipes/sft.toml"):
        assert resolve_checkpoint(ref) == ref
    with pytest.raises(InputFileError, match="a folder of run directories, not a checkpoint; name one of them: .*runs/grpo"):
        resolve_checkpoint(str(trained_runs))
    with pytest.raises(InputFileError, match="a run directory without a checkpoint"):
        resolve_checkpoint(str(trained_runs / "data"))
    with pytest.raises(InputFileError, match="is not a checkpoint directory"):
        resolve_checkpoint(str(trained_runs / "nope"))
    assert trained_senders(trained_runs) == [trained_runs / "grpo/checkpoints/step_8", trained_runs / "sft/checkpoints/step_12"]


def test_validate_resolves_start_from_a_run_and_refuses_a_folder_of_runs_before_any_model(trained_runs, tiny_model):
    common = ["--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "backend.lora_layers=1"]
    one_line_error(invoke("validate", RECIPES / "grpo.toml", *common, "--set", f"grpo.start_from={json.dumps(str(trained_runs))}"),
                   "[grpo] start_from:", "a folder of run directories")
    recipe = load_recipe(RECIPES / "grpo.toml", [*common[1::2], f"grpo.start_from={json.dumps(str(trained_runs / 'sft'))}"])
    assert recipe.settings["grpo"].start_from == str(trained_runs / "sft/checkpoints/step_12")


def test_eval_settings_and_init_from_take_run_directories(trained_runs):
    from emojikit.evaluation.evaluate import EvalSettings
    from emojikit_local.config import LocalConfig

    settings = EvalSettings(checkpoints=["base", str(trained_runs / "grpo"), "teacher:lexicon"])
    assert settings.checkpoints == ["base", str(trained_runs / "grpo/checkpoints/step_8"), "teacher:lexicon"]
    assert LocalConfig(init_from=trained_runs / "sft").init_from == trained_runs / "sft/checkpoints/step_12"


def test_chat_defaults_to_the_newest_trained_sender_and_says_which(trained_runs, tiny_model, monkeypatch):
    monkeypatch.chdir(trained_runs.parent)
    model = ["--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "decoder.max_emoji=3"]
    result = invoke("chat", "--recipe", RECIPES / "eval.toml", "--seed", 0, *model, input="pizza tonight\n")
    assert result.exit_code == 0, result.output
    assert "emojikit: sender runs/grpo/checkpoints/step_8 (the newest trained checkpoint under runs/" in result.stderr
    assert result.stdout.count("emoji> ") == 1
    by_run = invoke("chat", "--recipe", RECIPES / "eval.toml", "--checkpoint", "runs/sft", "--seed", 0, *model, input="pizza tonight\n")
    assert by_run.exit_code == 0 and "emojikit: sender" not in by_run.stderr, by_run.output
    one_line_error(invoke("chat", "--checkpoint", "runs", input="hi\n"), "--checkpoint runs: a folder of run directories")


def test_chat_says_it_uses_the_base_model_when_nothing_is_trained(tmp_path, monkeypatch):
    from emojikit.ui.interactive import default_sender

    said = []
    assert default_sender(None, tmp_path / "runs", said.append) == "base"
    assert "the untrained base model" in said[0]
    assert default_sender("base", tmp_path / "runs", said.append) == "base" and len(said) == 1


# --- one line instead of a traceback for a wrong model -------------------------------------------------


def test_backend_model_that_is_a_checkpoint_a_run_or_missing_is_one_line_at_validate(trained_runs):
    base = ["validate", RECIPES / "grpo.toml", "--set", "grpo.start_from=base", "--set"]
    one_line_error(invoke(*base, f"backend.model={json.dumps(str(trained_runs / 'sft/checkpoints/step_4'))}"),
                   "[backend] model:", "is a LoRA checkpoint, not a base model", "start_from")
    one_line_error(invoke(*base, f"backend.model={json.dumps(str(trained_runs / 'grpo'))}"), "[backend] model:", "is a run directory")
    one_line_error(invoke(*base, "backend.model=/nonexistent/model"), "[backend] model: /nonexistent/model: no such model directory")


def test_mask_takes_a_checkpoint_or_run_as_the_model_it_was_trained_from(trained_runs, tiny_model):
    result = invoke("mask", "--model", trained_runs / "grpo/checkpoints/step_2")
    assert result.exit_code == 0, result.output
    assert f"emojikit: binding to {tiny_model}, the model" in result.stderr
    assert "fewest tokens for a valid answer" in result.stdout
    assert invoke("mask", "--model", trained_runs / "sft").exit_code == 0
    one_line_error(invoke("mask", "--model", "/nonexistent/model"), "--model: /nonexistent/model: no such model directory")


def test_a_model_load_prints_no_weight_bar_and_no_future_warning(tiny_model, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "emojikit.ui.cli", "chat", "--checkpoint", "base", "--seed", "0", "--recipe", str(RECIPES / "eval.toml"),
         "--set", f"backend.model={json.dumps(str(tiny_model))}"],
        input="pizza tonight\n", capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert "emoji> " in done.stdout
    assert "Loading weights" not in done.stderr and "FutureWarning" not in done.stderr, done.stderr


# --- the smoke chain and the set-up stamp ------------------------------------------------------------------


def test_the_smoke_recipe_is_a_chain_of_smoke_recipes_that_say_so():
    from emojikit.stages.pipeline import describe, plan

    stages = plan(RECIPES / "smoke.toml")
    assert [(s.kind, s.path.name) for s in stages] == [("data", "smoke-data.toml"), ("sft", "smoke-sft.toml"), ("grpo", "smoke.toml")]
    lines = describe(stages)
    assert all("runs/smoke" in line for line in lines[:3]) and lines[3].startswith("on ") and len(lines) == 4  # the stages, then the machine
    for stage in stages:
        assert stage.path.read_text(encoding="utf-8").startswith("# SMOKE RUN, NOT A RESULT")
    assert recipe_table("smoke.toml", "grpo")["compare"] is True


def setup_stamp(root: Path, **env: str) -> str:
    env = {**{k: v for k, v in os.environ.items() if k != "EMOJIKIT_TORCH_INDEX"}, **env}
    return subprocess.run(["bash", str(root / "bin/setup"), "--print-stamp"], capture_output=True, text=True, check=True, env=env).stdout.strip()


def test_a_moved_clone_wants_a_new_install(tmp_path):
    clones = []
    for name in ("a", "b"):
        (tmp_path / name / "bin").mkdir(parents=True)
        shutil.copy(REPO / "bin/setup", tmp_path / name / "bin/setup")
        shutil.copy(REPO / "pyproject.toml", tmp_path / name / "pyproject.toml")
        clones.append(tmp_path / name)
    a, b = clones
    assert setup_stamp(a) == setup_stamp(a) and len(setup_stamp(a)) == 64
    assert setup_stamp(a) != setup_stamp(b)  # same files, another place: reinstall
    moved = tmp_path / "moved"
    a.rename(moved)
    assert setup_stamp(moved) != setup_stamp(b) and not (moved / ".venv").exists()  # printing installs nothing
    before = setup_stamp(moved)
    with open(moved / "pyproject.toml", "a", encoding="utf-8") as f:
        f.write("\n# a dependency changed\n")
    assert setup_stamp(moved) != before
    # A GPU install (torch from another index) is another install too.
    assert setup_stamp(moved, EMOJIKIT_TORCH_INDEX="https://download.pytorch.org/whl/cu124") != setup_stamp(moved)


def test_a_checkpoint_plays_with_its_own_adapter_where_the_recipe_trains_fewer_layers(tiny_model, tmp_path):
    """The main job's RL stage trains the last layers of an SFT adapter that covers more
    (`lora_layers`); its comparison, `emojikit eval`, chat and serve build that recipe's backend
    and load checkpoints whose adapter covers every layer. Each plays the checkpoint as saved."""
    import torch

    from emojikit.api.components import BuildContext
    from emojikit.composition.registry import get_registry
    from emojikit.evaluation.comparison import comparison_recipe
    from emojikit.evaluation.evaluate import load_sender
    from emojikit.export import senders

    torch.set_num_threads(1)
    spec = get_registry().get("backend", "local")
    trained = spec.factory(spec.config(model=str(tiny_model)), BuildContext(seed=0))  # LoRA in both layers
    with torch.no_grad():
        for name, p in trained.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.5)  # an adapter that changes every layer's output
    run_dir = tmp_path / "runs" / "grpo"
    checkpoint = trained.save(str(run_dir / "checkpoints" / "step_8"), with_optimizer=False)
    model, recipe_toml = json.dumps(str(tiny_model)), (RECIPES / "grpo.toml").read_text(encoding="utf-8")
    (run_dir / "recipe.toml").write_text(recipe_toml.replace('model = "bundled:smollm2-135m-instruct"', f"model = {model}")
                                         .replace("lora_layers = 10", "lora_layers = 1"), encoding="utf-8")
    prompt = trained.encode_prompt([{"role": "user", "content": "pizza tonight?"}])
    want = trained.compute_logprobs([datum(prompt, [5, 6, 7])])

    recipe = load_recipe(run_dir / "recipe.toml", ['grpo.start_from="base"'])
    assert recipe.components["backend"].config.lora_layers == 1  # the layer RL would train
    assert comparison_recipe(recipe).components["backend"].config.lora_layers is None
    played = [load_sender(recipe, str(checkpoint), recipe.settings["game"], tmp_path / "eval"),  # the comparison, emojikit eval
              senders.build(senders.resolve(str(run_dir)))["backend"]]  # chat, serve, export, llm
    base = load_sender(recipe, "base", recipe.settings["game"], tmp_path / "eval")
    for policy in played:
        assert policy.compute_logprobs([datum(prompt, [5, 6, 7])])[0] == pytest.approx(want[0], abs=1e-5)
    assert base.compute_logprobs([datum(prompt, [5, 6, 7])])[0] != pytest.approx(want[0], abs=1e-3)  # the adapter matters


def datum(prompt: list[int], answer: list[int]):
    from emojikit.api.policy import Datum

    tokens = prompt + answer
    return Datum(model_input=tokens[:-1], target_tokens=tokens[1:], weights=[0.0] * (len(prompt) - 1) + [1.0] * len(answer))
