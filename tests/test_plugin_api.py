"""The public plugin API: docs/plugins.md's example plugin installed as a distribution and run
in a recipe, the README example, the assembly seam's errors, the format owner in `chat`, and
CLI flags applied as settings (`play --judge claude --set judge.timeout_s=2`)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

import emojikit
from emojikit import BuildContext, Component, ConfigModel, Episode, Message, hookimpl
from emojikit.composition import registry as registry_mod
from emojikit.composition.assembly import build_component
from emojikit.api.errors import PluginError
from emojikit.play.game import GameSettings, play
from emojikit.api.policy import Sample
from emojikit.composition.registry import Registry

ROOT = Path(__file__).resolve().parents[1]


def python_blocks(path: Path) -> list[str]:
    return re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)


def example_source() -> str:
    (block,) = [b for b in python_blocks(ROOT / "docs" / "plugins.md") if "register_teachers" in b]
    return block


def install_example(tmp_path: Path) -> Path:
    """docs/plugins.md's example as an installed distribution: a module and its dist-info."""
    site = tmp_path / "site"
    info = site / "emojikit_example-1.2.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: emojikit-example\nVersion: 1.2.0\n")
    (info / "entry_points.txt").write_text("[emojikit]\nexample = emojikit_example\n")
    (site / "emojikit_example.py").write_text(example_source())
    return site


def example_module() -> types.ModuleType:
    module = types.ModuleType("emojikit_example")
    exec(compile(example_source(), "emojikit_example.py", "exec"), module.__dict__)
    return module


class ScriptedPolicy:
    """A Policy at the game's boundary: answers every prompt with the same emoji, records prompts and decoders."""

    name = "scripted"

    def __init__(self, answer: str = "🍕🌙"):
        self.answer, self.prompts, self.decoders = answer, [], []

    def sample(self, prompts, n, params, decoder=None):
        self.prompts.extend(prompts)
        self.decoders.append(decoder)
        return [[Sample(prompt_tokens=[1], tokens=[2, 3], logprobs=[-0.1, -0.1], text=self.answer)] for _ in prompts]

    def __getattr__(self, name):  # the rest of the Policy protocol, unused here
        if name in ("encode_prompt", "encode_completion", "decode", "compute_logprobs", "forward_backward", "optim_step", "save", "load"):
            return lambda *a, **k: None
        raise AttributeError(name)


# --- the example plugin of docs/plugins.md --------------------------------------------------


def test_example_plugin_is_installed_listed_and_runs_a_data_recipe(tmp_path):
    site = install_example(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(site), "HF_HUB_OFFLINE": "1"}
    exe = [sys.executable, "-m", "emojikit.ui.cli"]
    listed = json.loads(subprocess.run(exe + ["list-plugins", "--json"], env=env, capture_output=True, text=True, check=True).stdout)
    mine = {(c["kind"], c["name"]) for c in listed["components"] if c["distribution"] == "emojikit-example"}
    assert mine == {("teacher", "keyword"), ("judge", "echo"), ("reward", "overlap")}
    described = subprocess.run(exe + ["describe", "teacher", "keyword"], env=env, capture_output=True, text=True, check=True).stdout
    assert "filler: text = " in described

    out = tmp_path / "run"
    recipe = tmp_path / "data.toml"
    recipe.write_text(textwrap.dedent(f"""
        kind = "data"
        name = "example"
        out = "{out}"
        [prompts]
        use = "generated"
        [teacher]
        use = "keyword"
        filler = "✨"
        [data]
        count = 24
        test_fraction = 0.25
        rl_count = 0
    """))
    ran = subprocess.run(exe + ["run", str(recipe)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    rows = [json.loads(line) for line in (out / "sft_train.jsonl").read_text().splitlines()]
    assert len(rows) == 18 and all(emojikit.DEFAULT_FORMAT.check(r["messages"][2]["content"]) for r in rows)
    assert rows[0]["messages"][0]["content"] == "Reply with 2-8 emoji only."


def test_a_reward_with_only_the_documented_contract_plays_a_game():
    reg = Registry(load_entrypoints=False)
    reg.register(example_module(), "example", "emojikit-example", "1.2.0")
    ctx = BuildContext(seed=0, registry=reg)
    judge = build_component("judge", "echo", {}, ctx)
    reward = build_component("reward", "overlap", {}, ctx)
    assert not hasattr(reward, "success_threshold")  # the optional capability is absent
    spelled = emojikit.api.emojis.names_text(["🍕", "🌙"])  # exactly what the echo judge will guess
    targets = [Message(spelled), Message("the weather is nice")]
    episodes = play(ScriptedPolicy("🍕🌙"), None, judge, reward, targets, settings=GameSettings(max_turns=2))
    first, second = episodes
    # overlap 1.0 reaches the default success threshold: the game ends the episode after one turn
    assert first.success and len(first.turns) == 1 and first.turns[0].similarity == 1.0
    assert second.turns[-1].similarity == 0.0 and not second.success and len(second.turns) == 2
    assert all("total" in ep.reward for ep in episodes)


def test_the_documented_plugin_example_runs():
    (block,) = [b for b in python_blocks(ROOT / "docs" / "plugins.md") if "def register_judges" in b]
    module = types.ModuleType("my_plugin")
    exec(compile(block, "my_plugin.py", "exec"), module.__dict__)
    reg = Registry(load_entrypoints=False)
    reg.register(module, "my_plugin")
    judge = build_component("judge", "echo", {"prefix": "> "}, BuildContext(registry=reg))
    assert judge.guess([emojikit.JudgeView(emoji_turns=["🍕"])]) == ["> pizza"]


# --- the assembly seam ------------------------------------------------------------------------


def plugin_with(factory=None, preflight=None) -> object:
    class Cfg(ConfigModel):
        size: int = 1

    class Plugin:
        @hookimpl
        def register_judges(self):
            return [Component("odd", "A judge that misbehaves.", Cfg, factory or (lambda cfg, ctx: object()), preflight=preflight)]

    return Plugin()


def failing(exc):
    def raise_it(cfg, ctx):
        raise exc

    return raise_it


@pytest.mark.parametrize(
    "plugin, needles",
    [
        (plugin_with(), ["[judge] judge 'odd'", "plugin 'odd-plugin'", "odd-dist 0.3", "not a Judge", "has no guess"]),
        (plugin_with(factory=failing(KeyError("weights"))), ["[judge] judge 'odd'", "plugin 'odd-plugin'", "factory failed: KeyError: 'weights'"]),
        (plugin_with(preflight=failing(OSError("disk\non fire"))), ["preflight failed: OSError: disk on fire"]),
    ],
)
def test_plugin_failures_are_one_line_naming_the_plugin(plugin, needles):
    reg = Registry(load_entrypoints=False)
    reg.register(plugin, "odd-plugin", "odd-dist", "0.3")
    with pytest.raises(PluginError) as err:
        build_component("judge", "odd", {}, BuildContext(registry=reg))
    message = str(err.value)
    assert "\n" not in message
    for needle in needles:
        assert needle in message, (needle, message)


def test_strict_plugins_shows_a_failing_factory_with_its_own_traceback(monkeypatch):
    reg = Registry(load_entrypoints=False)
    reg.register(plugin_with(factory=failing(KeyError("weights"))), "odd-plugin", "odd-dist", "0.3")
    monkeypatch.setenv("EMOJIKIT_STRICT_PLUGINS", "1")
    with pytest.raises(KeyError, match="weights"):  # the plugin's exception itself, to debug it
        build_component("judge", "odd", {}, BuildContext(registry=reg))


class WrongJudge:
    def __init__(self, returns):
        self.returns = returns

    def guess(self, views):
        return self.returns(views)


@pytest.mark.parametrize("returns, needle", [
    (lambda views: ["only one"], "guess returned 1 values for 2 views; it returns one per view"),
    (lambda views: None, "guess returned NoneType for 2 views"),
    (lambda views: [3, "x"], "guess returned an int among its guesses; each is a string, or None"),
])
def test_a_judge_that_returns_the_wrong_guesses_is_one_line_naming_its_plugin(returns, needle):
    reg = Registry(load_entrypoints=False)
    reg.register(plugin_with(factory=lambda cfg, ctx: WrongJudge(returns)), "odd-plugin", "odd-dist", "0.3")
    judge = build_component("judge", "odd", {}, BuildContext(registry=reg))
    reward = build_component("reward", "similarity", {}, BuildContext())
    with pytest.raises(PluginError) as err:
        play(ScriptedPolicy("🍕🌙"), None, judge, reward, [Message("a"), Message("b")], settings=GameSettings(max_turns=1))
    assert str(err.value).startswith("[judge] judge 'odd' (plugin 'odd-plugin', odd-dist 0.3): ") and needle in str(err.value)


def test_a_teacher_that_returns_the_wrong_answers_is_named_before_anything_is_saved():
    from emojikit.api.components import answers_of, mark_origin

    class ShortTeacher:
        def answer(self, messages):
            return ["🍕🌙"]

    teacher = ShortTeacher()
    mark_origin(teacher, "[teacher] teacher 'short' (plugin 'odd-plugin')")
    with pytest.raises(PluginError, match=r"^\[teacher\] teacher 'short' \(plugin 'odd-plugin'\): answer returned 1 values for 2 messages"):
        answers_of(teacher, [Message("a"), Message("b")])
    assert answers_of(teacher, [Message("a")]) == ["🍕🌙"]


def test_settings_are_validated_with_the_recipe_error_format():
    reg = Registry(load_entrypoints=False)
    reg.register(plugin_with(), "odd-plugin")
    with pytest.raises(emojikit.ConfigError, match=r"\[judge\] sise: unknown key \(did you mean 'size'\?\)"):
        build_component("judge", "odd", {"sise": 2}, BuildContext(registry=reg))


def test_needs_key_is_checked_by_the_core(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("EXAMPLE_API_KEY", raising=False)

    class Keyed:
        @hookimpl
        def register_judges(self):
            return [Component("keyed", "Needs a key.", ConfigModel, lambda cfg, ctx: None, needs_key="EXAMPLE_API_KEY")]

    reg = Registry(load_entrypoints=False)
    reg.register(Keyed(), "keyed")
    with pytest.raises(emojikit.MissingCredentialError, match=r"^\[judge\] the keyed judge needs an API key: set EXAMPLE_API_KEY"):
        build_component("judge", "keyed", {}, BuildContext(registry=reg))


# --- the format owner and CLI flags as settings -------------------------------------------------


@pytest.fixture
def scripted_backend(monkeypatch):
    """The default registry plus a `scripted` backend, so the CLI builds no real model."""
    policy = ScriptedPolicy("🍕🌙🎉")

    class Plugin:
        @hookimpl
        def register_backends(self):
            return [Component("scripted", "A scripted sender.", ConfigModel, lambda cfg, ctx: policy)]

    reg = Registry()
    reg.register(Plugin(), "scripted")
    monkeypatch.setattr(registry_mod, "_default", reg)
    return policy


def test_chat_max_emoji_prompts_and_decodes_the_same_range(scripted_backend):
    from emojikit.ui.cli import cli

    result = CliRunner().invoke(cli, ["chat", "--backend", "scripted", "--max-emoji", "4", "--seed", "0"], input="I love pizza\n")
    assert result.exit_code == 0, result.output
    (prompt,) = scripted_backend.prompts
    assert prompt[0] == {"role": "system", "content": "Reply with 2-4 emoji only."}
    (decoder,) = scripted_backend.decoders
    assert (decoder.min_emoji, decoder.max_emoji) == (2, 4)
    assert "emoji> 🍕🌙🎉" in result.output


def test_play_judge_flag_then_set_applies_to_the_new_judge(scripted_backend, monkeypatch):
    import emojikit.ui.interactive as interactive
    from emojikit.ui.cli import cli

    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key-not-real")
    seen = {}

    def fake_play(policy, decoder, judge, reward, targets, **kwargs):
        seen["judge"] = judge
        return [Episode(target=targets[0].text)]

    monkeypatch.setattr(interactive, "play", fake_play)
    result = CliRunner().invoke(cli, [
        "play", "--recipe", str(ROOT / "recipes" / "grpo.toml"), "--backend", "scripted", "--judge", "claude",
        "--set", "judge.timeout_s=2", "--message", "hello there", "--seed", "1",
    ])
    assert result.exit_code == 0, result.output
    assert type(seen["judge"]).__name__ == "ClaudeJudge" and seen["judge"].cfg.timeout_s == 2.0
