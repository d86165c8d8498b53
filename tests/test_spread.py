"""The seed spread beside a run's comparison: `emojikit spread` records several runs' comparisons,
`[grpo] seed_spread` sets them beside a later run's, and says which differences are outside noise.

The runs here are directories as a finished GRPO run leaves them (recipe.toml, code.json,
comparison.json, its start's recipe.toml), written by hand: no model plays.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.api.errors import ConfigError, InputFileError, RunDirectoryError
from emojikit.evaluation import spread
from emojikit.ui.cli import cli

ROOT = Path(__file__).resolve().parents[1]
TARGETS = [f"message {i}" for i in range(20)]
GRPO_RECIPE = 'kind = "grpo"\nname = "{name}"\nseed = {seed}\nout = "runs/{name}"\n[grpo]\nsteps = {steps}\nstart_from = "runs/sft-s{seed}/checkpoints/step_8"\n'
SFT_RECIPE = 'kind = "sft"\nname = "sft-s{seed}"\nseed = {seed}\n[sft]\nlearning_rate = 0.003\n'


def entry(wins: list[int]) -> dict:
    return {"masked": {"success_rate": sum(wins) / len(wins)}, "per_target_success": [bool(w) for w in wins],
            "per_target": [{"target": t, "success": bool(w), "n_turns": 1} for t, w in zip(TARGETS, wins)]}


def played(sft: list[int], grpo: list[int], judge: str) -> dict:
    return {"judge": judge, "targets": len(sft), "checkpoints": {"sft": entry(sft), "grpo": entry(grpo), "teacher (lexicon)": entry([1] * len(sft))}}


def write_run(root: Path, seed: int, kw: tuple[list[int], list[int]], ret: tuple[list[int], list[int]], steps: int = 8) -> Path:
    """runs/grpo-sS as a finished run with a comparison under `keywords` (trained) and `retrieval`."""
    (root / f"runs/sft-s{seed}").mkdir(parents=True, exist_ok=True)
    (root / f"runs/sft-s{seed}/recipe.toml").write_text(SFT_RECIPE.format(seed=seed))
    run = root / f"runs/grpo-s{seed}"
    run.mkdir(parents=True)
    (run / "recipe.toml").write_text(GRPO_RECIPE.format(name=f"grpo-s{seed}", seed=seed, steps=steps))
    (run / "code.json").write_text(json.dumps({"git": {"commit": "abc123"}}))
    results = played(*kw, "keywords")
    results |= {"seed": seed, "senders": {"sft": f"runs/sft-s{seed}/checkpoints/step_8", "grpo": f"runs/grpo-s{seed}/checkpoints/step_8"},
                "compare_files": {}, "readers": {"retrieval": {"heldout": played(*ret, "retrieval"), "compare_files": {}}},
                "start_label": "sft", "machine": {"cpu": "Test CPU", "cpu_kind": "AVX2", "cores": 2}}
    (run / "comparison.json").write_text(json.dumps(results))
    return run


# keywords: GRPO wins the same 8 more targets than its start in every run (outside noise);
# retrieval: one target more in one run, one fewer in another (inside noise).
SFT_WINS = [1, 0, 0, 0, 0] * 4
GAIN = [1, 1, 1, 0, 0] * 4
PLUS_ONE = [1, 0, 0, 0, 0] * 3 + [1, 1, 0, 0, 0]
MINUS_ONE = [1, 0, 0, 0, 0] * 3 + [0, 0, 0, 0, 0]


@pytest.fixture
def three_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return [write_run(tmp_path, 0, (SFT_WINS, GAIN), (SFT_WINS, PLUS_ONE)),
            write_run(tmp_path, 1, (SFT_WINS, GAIN), (SFT_WINS, MINUS_ONE)),
            write_run(tmp_path, 2, (SFT_WINS, GAIN), (SFT_WINS, SFT_WINS))]


def test_a_record_holds_every_runs_per_target_success_per_column(three_runs):
    data = spread.record(three_runs)
    assert list(data["columns"]) == ["keywords: held-out", "retrieval: held-out"]
    keywords = data["columns"]["keywords: held-out"]
    assert keywords["targets"] == 20 and keywords["start"] == ["10000" * 4] * 3 and keywords["grpo"] == ["11100" * 4] * 3
    assert data["columns"]["retrieval: held-out"]["grpo"] == ["10000" * 3 + "11000", "10000" * 3 + "00000", "10000" * 4]
    assert [(r["seed"], r["start_seed"], r["commit"], r["machine"]["cpu_kind"]) for r in data["runs"]] == [(s, s, "abc123", "AVX2") for s in range(3)]
    assert keywords["start_first_turn"] == ["10000" * 4] * 3  # every win here is a first-turn win
    assert "seed" not in data["recipe"] and data["recipe"]["grpo.steps"] == 8 and data["start_recipe"]["sft.learning_rate"] == 0.003


def test_the_comparison_says_which_recorded_differences_are_outside_noise(three_runs, tmp_path):
    path = tmp_path / "spread.json"
    path.write_text(json.dumps(spread.record(three_runs)))
    data = spread.read_record(path)
    this_run = json.loads((three_runs[0] / "comparison.json").read_text())
    table = spread.spread_markdown(data, path, this_run, three_runs[0])
    rows = {line.split(" | ")[0]: line for line in table.splitlines() if line.startswith("| keywords") or line.startswith("| retrieval")}
    # keywords: 0.2 -> 0.6 in every run: +40 points, no spread. The same 8 targets gained in each run count
    # once each (8 vs 0: p = 2 / 2^8), not 24 times
    assert rows["| keywords (trained): held-out"] == ("| keywords (trained): held-out | 0.200 | 0.200 ± 0.000 | 0.600 | 0.600 ± 0.000 | +40.0 points | "
                                                      "+40.0 ± 0.0 (+40.0 / +40.0 / +40.0; 8 vs 0, p 0.0078) | +40.0 ± 0.0 (8 vs 0, p 0.0078) |")
    # retrieval: +5 / -5 / 0 points: mean 0, sample std 5.0 between runs; one target gained, another lost: p 1
    assert rows["| retrieval: held-out"] == ("| retrieval: held-out | 0.200 | 0.200 ± 0.000 | 0.250 | 0.200 ± 0.050 | +5.0 points | "
                                             "+0.0 ± 5.0 (+5.0 / -5.0 / +0.0; 1 vs 1, p 1) | +0.0 ± 5.0 (1 vs 1, p 1) |")
    assert "Gains outside noise over the recorded runs (every run the same sign, p < 0.05): `keywords: held-out` (+40.0)." in table
    assert "Inside noise: `retrieval: held-out` (+0.0)." in table
    assert "start seed / GRPO seed: 0/0, 1/1, 2/2; CPU: AVX2" in table
    assert "another recipe" not in table


def test_a_run_of_another_recipe_is_told_its_spread_is_only_a_scale(three_runs, tmp_path):
    path = tmp_path / "spread.json"
    path.write_text(json.dumps(spread.record(three_runs)))
    other = write_run(tmp_path, 3, (SFT_WINS, GAIN), (SFT_WINS, SFT_WINS), steps=16)
    table = spread.spread_markdown(spread.read_record(path), path, json.loads((other / "comparison.json").read_text()), other)
    assert "The recorded runs had another recipe (differs in: grpo.steps)" in table


def test_runs_of_different_recipes_or_targets_are_not_recorded_together(three_runs, tmp_path):
    other = write_run(tmp_path, 3, (SFT_WINS, GAIN), (SFT_WINS, SFT_WINS), steps=16)
    with pytest.raises(ConfigError, match=r"runs/grpo-s3 is not a run of the recipe of .*grpo-s0 \(differs in: grpo.steps\)"):
        spread.record([three_runs[0], other])
    results = json.loads((three_runs[1] / "comparison.json").read_text())
    for row in results["checkpoints"].values():
        row["per_target"][0]["target"] = "another message"
    (three_runs[1] / "comparison.json").write_text(json.dumps(results))
    with pytest.raises(ConfigError, match="its `keywords: held-out` column played other targets"):
        spread.record(three_runs[:2])
    with pytest.raises(ConfigError, match="at least two distinct run directories"):
        spread.record([three_runs[0], three_runs[0]])


@pytest.mark.parametrize("text, message", [
    ("{", r"spread.json:1: not JSON"),
    ('{"format": "something else"}', "not a seed-spread file"),
    (json.dumps({"format": spread.FORMAT, "runs": [{}], "columns": {"k: held-out": {"targets": 1, "start": ["1"], "grpo": ["1"]}}}), "at least two runs"),
    (json.dumps({"format": spread.FORMAT, "runs": [{}, {}], "columns": {}}), "no columns recorded"),
    (json.dumps({"format": spread.FORMAT, "runs": [{}, {}], "columns": {"k: held-out": {"start": ["1", "1"], "grpo": ["1", "1"]}}}), "number of targets"),
    (json.dumps({"format": spread.FORMAT, "runs": [{}, {}], "columns": {"k: held-out": {"targets": 1, "start": ["1", "1"], "grpo": ["1", "12"]}}}),
     "column `k: held-out`: expected start and grpo .* one string of 1 0s and 1s"),
    (json.dumps({"format": spread.FORMAT, "runs": [{}, {}], "columns": {"k: held-out": {"targets": 1, "start": ["1"], "grpo": ["1", "1"]}}}), "per run"),
])
def test_a_broken_spread_file_is_one_line_naming_the_file(tmp_path, text, message):
    path = tmp_path / "spread.json"
    path.write_text(text)
    with pytest.raises(InputFileError, match=message) as caught:
        spread.read_record(path)
    assert "\n" not in str(caught.value) and str(path) in str(caught.value)


def test_the_spread_command_writes_a_record_and_fails_in_one_line(three_runs, tmp_path):
    result = CliRunner().invoke(cli, ["spread", *map(str, three_runs), "--out", "spread.json"])
    assert result.exit_code == 0, result.output
    assert "3 runs, 2 columns (keywords: held-out, retrieval: held-out)" in result.output
    assert spread.read_record(tmp_path / "spread.json")["columns"]["keywords: held-out"]["grpo"] == ["11100" * 4] * 3
    (three_runs[2] / "comparison.json").unlink()
    result = CliRunner().invoke(cli, ["spread", *map(str, three_runs), "--out", "again.json"])
    assert result.exit_code != 0 and "grpo-s2: no comparison.json" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "again.json").exists() and (tmp_path / "spread.json").stat().st_size > 0


def test_a_recipe_naming_a_broken_spread_file_fails_before_anything_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "recipes").symlink_to(ROOT / "recipes")
    Path("spread.json").write_text('{"format": "x"}')
    result = CliRunner().invoke(cli, ["validate", "recipes/grpo.toml", "--set", 'grpo.seed_spread="spread.json"'])
    assert result.exit_code != 0 and "seed_spread" in result.output and "spread.json: not a seed-spread file" in result.output
    assert "Traceback" not in result.output


def test_a_comparison_a_record_cannot_read_is_one_line_naming_it(three_runs, tmp_path):
    results = json.loads((three_runs[1] / "comparison.json").read_text())
    for row in results["checkpoints"].values():
        del row["per_target"]  # a comparison written before per-target games were kept
    (three_runs[1] / "comparison.json").write_text(json.dumps(results))
    result = CliRunner().invoke(cli, ["spread", *map(str, three_runs), "--out", "spread.json"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "grpo-s1/comparison.json: not a GRPO run's comparison as emojikit spread reads it (no 'per_target')" in result.output
    assert not (tmp_path / "spread.json").exists()


def test_runs_that_played_other_columns_are_not_recorded_together(three_runs):
    results = json.loads((three_runs[1] / "comparison.json").read_text())
    results["readers"] = {}
    (three_runs[1] / "comparison.json").write_text(json.dumps(results))
    with pytest.raises(ConfigError, match=r"grpo-s1's comparison has no `retrieval: held-out` column, which .*grpo-s0's has"):
        spread.record(three_runs)


def test_a_run_outside_git_and_a_start_found_beside_the_run_directory(three_runs, tmp_path, monkeypatch):
    (three_runs[0] / "code.json").write_text(json.dumps({"git": None}))  # a pip install: no checkout
    monkeypatch.chdir(tmp_path / "runs")  # the starts' relative paths are found from the project holding runs/
    data = spread.record(three_runs)
    assert [r["commit"] for r in data["runs"]] == [None, "abc123", "abc123"] and data["start_recipe"]["sft.learning_rate"] == 0.003
    (tmp_path / "runs/sft-s2/recipe.toml").unlink()
    with pytest.raises(RunDirectoryError, match=r"grpo-s2: the start's recipe.toml is not at .*runs/sft-s2/recipe.toml"):
        spread.record(three_runs)


def test_a_run_that_played_other_targets_is_told_so_and_a_broken_record_does_not_cost_the_comparison(three_runs, tmp_path):
    path = tmp_path / "spread.json"
    path.write_text(json.dumps(spread.record(three_runs)))
    results = json.loads((three_runs[0] / "comparison.json").read_text())
    for row in results["checkpoints"].values():
        row["per_target"][0]["target"] = "another message"
    table = spread.spread_markdown(spread.read_record(path), path, results, three_runs[0])
    assert "| keywords (trained): held-out | 0.200 | recorded on other targets (20) | 0.600 |" in table
    path.write_text("{")
    note = spread.spread_or_note(path, results, three_runs[0])
    assert note.startswith("The seed spread of `[grpo] seed_spread` is not set beside this run: ") and "spread.json:1: not JSON" in note


def test_an_empty_seed_spread_is_none():
    from emojikit.training.grpo import GRPOSettings

    assert GRPOSettings(seed_spread="").seed_spread is None
