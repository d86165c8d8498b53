"""Core: plugin registry, recipes and their errors, the CLI, run directories."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import Field

from emojikit import Component, hookimpl, hookspecs, registry as registry_mod
from emojikit.ui.cli import cli
from emojikit.api.config import ConfigModel
from emojikit.api.errors import ConfigError, PluginError, RunDirectoryError
from emojikit.composition.recipe import load_recipe
from emojikit.composition.registry import Registry
from emojikit.stages.runs import RunDir

ROOT = Path(__file__).resolve().parents[1]
THIRDPARTY = Path(__file__).parent / "thirdparty"


class TinyConfig(ConfigModel):
    size: int = Field(3, ge=1, le=10, description="How many.")
    label: str = "x"


def make_plugin(kind_hook: str, *names: str):
    class Plugin:
        pass

    def hook():
        return [Component(n, f"{n} summary", TinyConfig, lambda cfg, ctx: cfg) for n in names]

    setattr(Plugin, kind_hook, staticmethod(hookimpl(hook)))
    return Plugin()


def fresh_registry(*plugins) -> Registry:
    reg = Registry(load_entrypoints=False)
    for i, plugin in enumerate(plugins):
        reg.register(plugin, f"p{i}", "dist", "1.0")
    return reg


def invoke(*args, **kwargs):
    return CliRunner().invoke(cli, list(args), catch_exceptions=False, **kwargs)


def assert_one_line_error(result, *needles):
    assert result.exit_code == 2, result.output
    lines = [l for l in result.output.strip().splitlines() if l.strip()]
    assert len(lines) == 1, result.output
    assert "Traceback" not in result.output
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


# --- registry ---------------------------------------------------------------------------


def test_components_know_their_plugin_and_kind():
    reg = fresh_registry(make_plugin("register_judges", "a", "b"), make_plugin("register_rewards", "r"))
    names = [(c.kind, c.name, c.plugin, c.distribution, c.version) for c in reg.components()]
    assert ("judge", "a", "p0", "dist", "1.0") in names and ("reward", "r", "p1", "dist", "1.0") in names
    assert [c.name for c in reg.components("judge")] == ["a", "b"]


def test_duplicate_names_name_both_plugins():
    reg = fresh_registry(make_plugin("register_judges", "same", "other"), make_plugin("register_judges", "same"))
    # Listing still works: the clash is a conflict, the other components stay usable.
    assert [c.name for c in reg.components("judge")] == ["other"]
    (conflict,) = reg.conflicts
    assert (conflict.kind, conflict.name, [c.plugin for c in conflict.providers]) == ("judge", "same", ["p1", "p0"])
    # Only asking for the clashing name fails, naming both plugins.
    with pytest.raises(PluginError) as err:
        reg.get("judge", "same")
    assert "'p0'" in str(err.value) and "'p1'" in str(err.value) and "same" in str(err.value)


def test_list_plugins_reports_a_duplicate_as_a_conflict_row(tmp_path):
    """Two distributions register the same judge name: list-plugins shows a CONFLICT row naming both."""
    source = (THIRDPARTY / "emojikit_echo_judge.py").read_text()
    site = write_fake_dist(tmp_path, "emojikit_echo_clone", source)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(THIRDPARTY), str(site)])}
    exe = [sys.executable, "-m", "emojikit.ui.cli"]
    text = subprocess.run(exe + ["list-plugins", "--kind", "judge"], env=env, capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if line.startswith("CONFLICT"))
    assert "judge/echo" in row and "emojikit-echo-judge" in row and "emojikit_echo_clone" in row
    assert any(line.startswith("judge") and " retrieval " in line for line in text.stdout.splitlines())
    listed = json.loads(subprocess.run(exe + ["list-plugins", "--json"], env=env, capture_output=True, text=True, check=True).stdout)
    (conflict,) = listed["conflicts"]
    assert {p["distribution"] for p in conflict["providers"]} == {"emojikit-echo-judge", "emojikit_echo_clone"}
    used = subprocess.run(exe + ["describe", "judge", "echo"], env=env, capture_output=True, text=True)
    assert used.returncode == 2 and "duplicate judge 'echo'" in used.stderr and "Traceback" not in used.stderr


def test_same_name_in_two_kinds_is_fine():
    reg = fresh_registry(make_plugin("register_judges", "x"), make_plugin("register_teachers", "x"))
    assert reg.get("judge", "x").kind == "judge" and reg.get("teacher", "x").kind == "teacher"


def test_unknown_component_lists_installed_names_with_suggestion():
    reg = fresh_registry(make_plugin("register_judges", "retrieval", "claude"))
    with pytest.raises(PluginError, match=r"did you mean 'retrieval'.*installed: claude, retrieval"):
        reg.get("judge", "retreival")


def test_misspelled_hook_is_rejected_at_registration():
    class Bad:
        @hookimpl
        def register_judgez(self):
            return []

    reg = Registry(load_entrypoints=False)
    with pytest.raises(Exception, match="register_judgez"):
        reg.register(Bad(), "bad")


def test_hook_that_raises_is_reported_and_others_still_load():
    class Broken:
        @hookimpl
        def register_judges(self):
            raise RuntimeError("boom")

    reg = Registry(load_entrypoints=False)
    reg.register(Broken(), "broken")
    reg.register(make_plugin("register_judges", "fine"), "good")
    with pytest.warns(UserWarning, match="broken"):
        assert [c.name for c in reg.components("judge")] == ["fine"]
    assert reg.failures[0].plugin == "broken" and "boom" in reg.failures[0].error


def write_fake_dist(tmp_path: Path, name: str, module_source: str) -> Path:
    site = tmp_path / "site"
    info = site / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[emojikit]\n{name} = {name}\n")
    (site / f"{name}.py").write_text(module_source)
    return site


def test_plugin_failing_on_import_is_reported_and_others_load(tmp_path, monkeypatch):
    site = write_fake_dist(tmp_path, "emojikit_broken_xyz", "raise ImportError('missing dependency foo')\n")
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.syspath_prepend(str(THIRDPARTY))
    with pytest.warns(UserWarning, match="emojikit_broken_xyz"):
        reg = Registry()
    assert any(f.plugin == "emojikit_broken_xyz" and "missing dependency foo" in f.error for f in reg.failures)
    assert reg.get("judge", "echo").distribution == "emojikit-echo-judge"
    # Strict mode re-raises instead.
    monkeypatch.setenv("EMOJIKIT_STRICT_PLUGINS", "1")
    with pytest.raises(ImportError):
        Registry()


def test_allowlist_and_blocklist(monkeypatch):
    monkeypatch.syspath_prepend(str(THIRDPARTY))
    monkeypatch.setenv("EMOJIKIT_PLUGINS", "echo")
    reg = Registry()
    assert [c.name for c in reg.components()] == ["echo"]
    monkeypatch.delenv("EMOJIKIT_PLUGINS")
    monkeypatch.setenv("EMOJIKIT_BLOCK_PLUGINS", "echo")
    assert "echo" not in [c.name for c in Registry().components("judge")]


def test_every_hookspec_is_documented_in_the_readme():
    readme = (ROOT / "README.md").read_text()
    for hook in hookspecs.KIND_HOOKS.values():
        assert hook in readme, f"{hook} is not documented in README.md"


# --- recipes ----------------------------------------------------------------------------


def write(tmp_path: Path, text: str, name: str = "r.toml") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_recipe_overrides_and_all_errors_collected(tmp_path):
    reg = fresh_registry(make_plugin("register_prompt_sources", "gen"), make_plugin("register_teachers", "lex"))
    path = write(tmp_path, """
        kind = "data"
        name = "t"
        [prompts]
        use = "gen"
        size = 4
        [teacher]
        use = "lex"
    """)
    recipe = load_recipe(path, ["prompts.size=7", "teacher.label=hello world", "seed=5"], registry=reg)
    assert recipe.components["prompts"].config.size == 7
    assert recipe.components["teacher"].config.label == "hello world"
    assert recipe.seed == 5 and recipe.out == Path("runs/t")
    with pytest.raises(ConfigError) as err:
        load_recipe(path, ["prompts.size=99", "teacher.lable=1"], registry=reg)
    message = str(err.value)
    assert "[prompts] size" in message and "[teacher] lable: unknown key (did you mean 'label'?)" in message
    assert "\n" not in message


def test_resolved_recipe_redacts_secrets(tmp_path):
    reg = fresh_registry(make_plugin("register_prompt_sources", "gen"), make_plugin("register_teachers", "lex"))
    path = write(tmp_path, 'kind = "data"\n[prompts]\nuse = "gen"\n[teacher]\nuse = "lex"\nlabel = "y"\n')
    recipe = load_recipe(path, registry=reg)
    recipe.data["teacher"]["api_key"] = "sk-very-secret"
    text = recipe.to_toml()
    assert "sk-very-secret" not in text and "<redacted>" in text


def test_every_shipped_recipe_validates(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    monkeypatch.setenv("TINKER_API_KEY", "test-key-not-real")
    recipes = sorted((ROOT / "recipes").glob("*.toml"))
    assert recipes, "no recipes shipped"
    for path in recipes:
        try:
            load_recipe(path)
        except ConfigError as exc:
            # A recipe may only fail for an input that another recipe makes (e.g. the SFT dataset).
            assert "make it with: emojikit run" in str(exc), f"{path.name}: {exc}"


# --- CLI bad input: one line, names file/table/key, exit 2, nothing written --------------

DATA_RECIPE = """
kind = "data"
name = "bad"
out = "{out}"
[prompts]
use = "generated"
[teacher]
use = "lexicon"
"""


@pytest.mark.parametrize(
    "body, needles",
    [
        ('kind = "data"\n[prompts\nuse = 1\n', ["r.toml", "TOML syntax error", "line 2"]),
        ('kind = "train"\n', ["r.toml", "kind", "'train'", "data, sft, grpo, rft, eval"]),
        (DATA_RECIPE.replace('use = "lexicon"', 'use = "lexicn"'), ["r.toml", "[teacher] use", "did you mean 'lexicon'", "installed:"]),
        (DATA_RECIPE + "[data]\ncont = 5\n", ["r.toml", "[data] cont: unknown key", "did you mean 'count'"]),
        (DATA_RECIPE + "[data]\ncount = \"many\"\n", ["r.toml", "[data] count"]),
        (DATA_RECIPE + "[data]\ncount = -4\n", ["r.toml", "[data] count", "greater than"]),
        (DATA_RECIPE.replace('use = "generated"', 'use = "jsonl"\npath = "does/not/exist.jsonl"'), ["r.toml", "[prompts] path", "file not found", "does/not/exist.jsonl"]),
        (DATA_RECIPE + "[teechar]\nuse = \"x\"\n", ["r.toml", "[teechar]", "did you mean 'teacher'"]),
    ],
)
def test_bad_recipe_input_is_one_line_exit_2(tmp_path, body, needles):
    out = tmp_path / "run"
    path = write(tmp_path, body.format(out=out) if "{out}" in body else body)
    result = invoke("run", str(path))
    assert_one_line_error(result, *needles)
    assert not out.exists()


def test_bad_jsonl_line_names_file_and_line(tmp_path):
    data = tmp_path / "prompts.jsonl"
    data.write_text('{"text": "hello there"}\n{"text": oops}\n')
    out = tmp_path / "run"
    path = write(tmp_path, DATA_RECIPE.format(out=out).replace('use = "generated"', f'use = "jsonl"\npath = "{data}"'))
    assert_one_line_error(invoke("run", str(path)), f"{data}:2", "not valid JSON")
    assert not out.exists()


def test_bad_override_syntax(tmp_path):
    path = write(tmp_path, DATA_RECIPE.format(out=tmp_path / "run"))
    assert_one_line_error(invoke("run", str(path), "--set", "nonsense"), "expected table.key=value")


def test_missing_recipe_file(tmp_path):
    assert_one_line_error(invoke("run", str(tmp_path / "nope.toml")), "nope.toml", "not found")


# --- CLI listing -------------------------------------------------------------------------


def test_list_plugins_json_lists_seven_kinds_and_builtins():
    result = invoke("list-plugins", "--json")
    assert result.exit_code == 0
    data = json.loads(result.output)
    assert set(data["kinds"]) == {"prompt_source", "teacher", "judge", "reward", "decoder", "backend", "tracker"}
    got = {(c["kind"], c["name"]) for c in data["components"]}
    for expected in [("prompt_source", "generated"), ("prompt_source", "jsonl"), ("teacher", "lexicon"), ("judge", "retrieval"), ("reward", "similarity"), ("decoder", "emoji-mask"), ("decoder", "none"), ("backend", "local"),
                     ("tracker", "tensorboard"), ("tracker", "trackio"), ("tracker", "wandb"), ("tracker", "mlflow")]:
        assert expected in got
    assert all(c["distribution"] == "emojikit" for c in data["components"])
    assert data["failures"] == []


def test_describe_shows_every_field_of_every_builtin():
    reg = registry_mod.get_registry()
    for component in reg.components():
        result = invoke("describe", component.kind, component.name)
        assert result.exit_code == 0, result.output
        for field in component.config.model_fields:
            assert f"  {field}:" in result.output, (component.name, field)


def test_describe_unknown_name():
    assert_one_line_error(invoke("describe", "judge", "retreival"), "did you mean 'retrieval'")


def test_third_party_plugin_listed_and_usable_in_a_recipe(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(THIRDPARTY)}
    exe = [sys.executable, "-m", "emojikit.ui.cli"]
    listed = subprocess.run(exe + ["list-plugins", "--kind", "judge", "--json"], env=env, capture_output=True, text=True, check=True)
    echo = [c for c in json.loads(listed.stdout)["components"] if c["name"] == "echo"]
    assert echo and echo[0]["distribution"] == "emojikit-echo-judge" and echo[0]["version"] == "0.1.0"
    recipe = ROOT / "recipes" / "grpo.toml"
    checked = subprocess.run(exe + ["validate", str(recipe), "--set", 'judge={ use = "echo", prefix = "guess: " }'], env=env, capture_output=True, text=True, cwd=ROOT)
    assert checked.returncode == 0, checked.stderr
    assert "judge=echo" in checked.stdout


def test_list_plugins_is_fast():
    # Heavy libraries load inside factories only, so listing never imports torch.
    probe = "import runpy,sys; sys.argv=['emojikit','list-plugins']\ntry:\n    runpy.run_module('emojikit.ui.cli', run_name='__main__')\nexcept SystemExit: pass\nprint('TORCH' if 'torch' in sys.modules else 'NO_TORCH')"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("NO_TORCH"), out


# --- run directories ---------------------------------------------------------------------


def test_run_directory_refuses_reuse_and_lock(tmp_path):
    path = tmp_path / "run"
    with RunDir(path, recipe_toml="kind = 'data'\n") as run:
        run.log("metrics.jsonl", {"step": 1})
        with pytest.raises(RunDirectoryError, match="in use"):
            RunDir(path, resume=True)
    with pytest.raises(RunDirectoryError, match="--resume"):
        RunDir(path)
    with RunDir(path, resume=True) as run:
        assert run.read("metrics.jsonl") == [{"step": 1}]
    with pytest.raises(RunDirectoryError, match="nothing to resume"):
        RunDir(tmp_path / "empty", resume=True)


def test_metrics_truncate_and_torn_tail(tmp_path):
    with RunDir(tmp_path / "run") as run:
        for step in range(1, 6):
            run.log("metrics.jsonl", {"step": step})
        with open(run.file("metrics.jsonl"), "a") as f:
            f.write('{"step": 6, "los')  # a write cut by kill -9
        assert [r["step"] for r in run.read("metrics.jsonl")] == [1, 2, 3, 4, 5]
        run.truncate("metrics.jsonl", 3)
        assert [r["step"] for r in run.read("metrics.jsonl")] == [1, 2, 3]


def test_a_checkpoint_names_its_run_and_the_comparison_labels_the_start_by_its_kind(tmp_path):
    from emojikit.evaluation.comparison import senders
    from emojikit.stages.runs import run_of_checkpoint

    with RunDir(tmp_path / "runs" / "sft", recipe_toml='kind = "sft"\n') as run:
        with run.new_checkpoint(3) as tmp:
            (tmp / "trainer_state.json").write_text("{}")
    step = run.checkpoint_path(3)
    assert run_of_checkpoint(step) == tmp_path / "runs" / "sft"
    assert run_of_checkpoint(tmp_path / "runs" / "sft") == tmp_path / "runs" / "sft"  # a run directory: its final checkpoint's run
    assert senders(str(step), "runs/grpo")["sft"] == str(step)
    loose = tmp_path / "exported"  # a checkpoint outside a run's checkpoints/: no run, no label, no failure
    loose.mkdir()
    assert run_of_checkpoint(loose) is None and senders(str(loose), "runs/grpo")["start"] == str(loose)
    assert [run_of_checkpoint(r) for r in ("base", "teacher:lexicon", "tinker://run/weights/3")] == [None, None, None]


def test_checkpoint_appears_only_when_complete(tmp_path):
    with RunDir(tmp_path / "run") as run:
        with run.new_checkpoint(2) as tmp:
            (tmp / "w.bin").write_bytes(b"x")
        with pytest.raises(RuntimeError):
            with run.new_checkpoint(4) as tmp:
                (tmp / "w.bin").write_bytes(b"partial")
                raise RuntimeError("killed")
        assert run.latest_checkpoint() == (2, run.checkpoint_path(2))
        assert not run.checkpoint_path(4).exists()
