"""Bad input: every row of the table in docs/errors.md, through the real CLI.

Each case: exit status 2, one line on the output, no traceback, the line names the file /
table / key (or file:line) and says what to do, and nothing in the working directory changed
(an existing run directory, the datasets and the recipes are byte for byte as before; no run
directory appears). Eight more recipe cases are in test_core.py
(test_bad_recipe_input_is_one_line_exit_2 and its neighbours).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pytest
from click.testing import CliRunner

from emojikit.ui.cli import cli
from emojikit.stages.runs import RunDir
from recipe_texts import GRPO_COMPONENTS, SFT, jsonl

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
SECRET = "sk-ant-do-not-print-0123456789"


def chat(i: int) -> dict:
    return {"messages": [{"role": "user", "content": f"news number {i}"}, {"role": "assistant", "content": "🍕🎉"}]}


GRPO = 'kind = "grpo"\nout = "run"\n' + GRPO_COMPONENTS + '[grpo]\nstart_from = "base"\n'


@dataclass
class Case:
    id: str
    args: list[str]
    needles: list[str]
    setup: Optional[Callable[[Path, pytest.MonkeyPatch], None]] = None
    lock_run_dir: bool = False
    files: dict[str, str | bytes] = field(default_factory=dict)


def existing_run(tmp: Path, monkeypatch) -> None:
    with RunDir(tmp / "run", recipe_toml=SFT) as run:
        run.log("metrics.jsonl", {"step": 1, "loss": 2.0})


def no_keys(tmp: Path, monkeypatch) -> None:
    for var in ("ANTHROPIC_API_KEY", "TINKER_API_KEY"):
        monkeypatch.delenv(var, raising=False)


BAD_TRAIN = jsonl([chat(0), chat(1)]) + '{"messages": [oops]}\n' + jsonl([chat(3)])
NO_ANSWER = jsonl([chat(0)]) + jsonl([{"messages": [{"role": "user", "content": "no answer here"}]}])

CASES = [
    # recipes
    Case("recipe-not-utf8", ["run", "bad.toml"], ["bad.toml: not a UTF-8 text file"], files={"bad.toml": b'kind = "sft"\n# caf\xe9\n'}),
    Case("template-unknown-placeholder", ["run", "grpo.toml", "--set", 'game.first_turn="Say {msg}"'],
         ["grpo.toml: [game] first_turn: unknown placeholder(s) {msg}; allowed: {target}"]),
    Case("start-from-missing", ["run", "grpo.toml", "--set", "grpo.start_from=runs/sft/checkpoints/step_9"],
         ["grpo.toml: [grpo] start_from: runs/sft/checkpoints/step_9 is not a checkpoint directory"]),
    Case("secret-as-unknown-key", ["run", str(RECIPES / "data.toml"), "--set", f"teacher.api_key={SECRET}"],
         ["data.toml: [teacher] api_key: unknown key"]),
    # datasets
    Case("sft-train-bad-json", ["run", "sft.toml"], ["sft.toml: [sft] train_file: train.jsonl:3: not valid JSON"], files={"train.jsonl": BAD_TRAIN}),
    Case("sft-train-wrong-shape", ["run", "sft.toml"], ['[sft] train_file: train.jsonl:2: expected {"messages": [...]} ending with an assistant message'], files={"train.jsonl": NO_ANSWER}),
    Case("sft-test-empty", ["run", "sft.toml"], ["[sft] test_file: test.jsonl: no examples"], files={"test.jsonl": ""}),
    Case("sft-dataset-missing", ["run", "sft.toml", "--set", "sft.train_file=runs/data/sft_train.jsonl"],
         ["[sft] train_file: file not found: runs/data/sft_train.jsonl (make it with: emojikit run recipes/data.toml)"]),
    Case("sft-data-recipe-missing", ["run", "sft.toml", "--set", "sft.data=data.toml"], ["sft.toml: [sft] data: data.toml is not a recipe file"]),
    Case("prompts-missing-text-field", ["run", str(RECIPES / "data.toml"), "--set", 'prompts={ use = "jsonl", path = "prompts.jsonl" }'],
         ["data.toml: [prompts] prompts.jsonl:2: expected a non-empty string in field 'text'"],
         files={"prompts.jsonl": jsonl([{"text": "hello"}, {"message": "no text field"}])}),
    Case("heldout-file-missing", ["run", "grpo.toml", "--set", "grpo.heldout_file=heldout.jsonl"], ["grpo.toml: [grpo] heldout_file: heldout.jsonl does not exist"]),
    Case("heldout-file-missing-before-upstream", ["run", "grpo.toml", "--set", "grpo.start_from=sft2.toml", "--set", "grpo.heldout_file=heldout.jsonl"],
         ["grpo.toml: [grpo] heldout_file: heldout.jsonl does not exist"], files={"sft2.toml": SFT.replace('out = "run"', 'out = "sftrun"')}),
    Case("compare-file-bad-line", ["validate", "grpo.toml", "--set", 'grpo.compare_files=["real.jsonl"]'],
         ['[grpo] compare_files', 'real.jsonl:2: expected a "text" string'], files={"real.jsonl": jsonl([{"text": "hi there"}, {"message": "no text"}])}),
    Case("targets-not-utf8", ["eval", "--recipe", str(RECIPES / "eval.toml"), "--targets", "targets.csv", "--out", "run"],
         ["targets.csv:2: not UTF-8"], files={"targets.csv": b"text\ncaf\xe9 au lait\n"}),
    Case("targets-csv-unquoted-comma", ["eval", "--recipe", str(RECIPES / "eval.toml"), "--targets", "targets.csv", "--out", "run"],
         ["targets.csv:3: 3 fields, the header has 2: quote a text that holds a comma"],
         files={"targets.csv": "text,category\nfine,social\nhello, world,greeting\n"}),
    Case("mix-source-key-typo", ["validate", str(RECIPES / "data.toml"), "--set", 'prompts={ use = "mix", sources = [{ use = "generated", wieght = 2 }] }'],
         ["data.toml: [prompts] sources", "wieght: unknown key (did you mean 'weight'?)"]),
    Case("mix-source-own-key-typo", ["validate", str(RECIPES / "data.toml"), "--set", 'prompts={ use = "mix", sources = [{ use = "chitchat", splitt = "heldout" }] }'],
         ["data.toml: [prompts.sources[0]] splitt: unknown key (did you mean 'split'?)"]),
    Case("eval-targets-missing", ["eval", "--recipe", str(RECIPES / "eval.toml"), "--targets", "targets.txt", "--out", "run"],
         ["eval.toml: [eval] targets_file", "targets.txt"]),
    # checkpoints
    Case("eval-sft-checkpoint-not-dir", ["eval-sft", "--recipe", "sft.toml", "--checkpoint", "train.jsonl"], ["--checkpoint train.jsonl: not a checkpoint directory"]),
    Case("eval-checkpoint-not-dir", ["eval", "--recipe", str(RECIPES / "eval.toml"), "--checkpoint", "runs/sft/checkpoints/step_3", "--out", "run"],
         ["eval.toml: [eval] checkpoints: runs/sft/checkpoints/step_3 is not a checkpoint directory"]),
    # run directories
    Case("resume-nothing", ["run", "sft.toml", "--resume"], ["run: nothing to resume (the run directory is empty or missing)"]),
    Case("run-dir-locked", ["run", "sft.toml", "--resume"], ["run: run directory is in use by another emojikit process"], setup=existing_run, lock_run_dir=True),
    Case("inspect-no-run", ["inspect", "runs/nothing"], ["runs/nothing: no such run directory"]),
    # CLI arguments
    Case("set-not-a-table", ["run", "sft.toml", "--set", "kind.name=x"], ["--set kind.name=x: kind is not a table"]),
    Case("set-wrong-type", ["run", "sft.toml", "--set", "seed=abc"], ["sft.toml: seed: expected an integer, got 'abc'"]),
    Case("set-true-as-number", ["validate", "grpo.toml", "--set", "grpo.steps=true"], ["grpo.toml: [grpo] steps: expected an integer, got true"]),
    Case("set-text-as-truth", ["validate", "grpo.toml", "--set", "grpo.compare=yes"], ["grpo.toml: [grpo] compare: expected true or false, got 'yes'"]),
    Case("out-is-a-file-validate", ["validate", "sft.toml", "--set", "out=train.jsonl"], ["train.jsonl: is a file, expected a run directory"]),
    Case("list-plugins-unknown-kind", ["list-plugins", "--kind", "judges"], ["'judges' is not a component kind (did you mean 'judge'?); kinds: prompt_source, teacher, judge"]),
    Case("describe-unknown-component", ["describe", "teacher", "lexicn"], ["lexicn", "did you mean 'lexicon'"]),
    # environment
    Case("anthropic-key-missing", ["run", str(RECIPES / "claude-data.toml")], ["[prompts] the claude prompt source needs an API key: set ANTHROPIC_API_KEY in the environment or in a .env file"], setup=no_keys),
    Case("tinker-key-missing", ["run", str(RECIPES / "tinker-sft.toml"), "--set", "sft.train_file=train.jsonl", "--set", "sft.test_file=test.jsonl"],
         ["tinker-sft.toml: [backend]", "set TINKER_API_KEY in the environment or in a .env file"], setup=no_keys),
]


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


def run_case(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """(CLI result, snapshot of the working directory before the command)."""
    monkeypatch.chdir(tmp_path)  # no .env, no runs/ here
    files = {"train.jsonl": jsonl(chat(i) for i in range(4)), "test.jsonl": jsonl(chat(i) for i in range(4, 6)), "sft.toml": SFT, "grpo.toml": GRPO, **case.files}
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    if case.setup:
        case.setup(tmp_path, monkeypatch)
    before = snapshot(tmp_path)
    holder = RunDir(tmp_path / "run", resume=True) if case.lock_run_dir else None  # "another process"
    try:
        return CliRunner().invoke(cli, case.args, catch_exceptions=False), before
    finally:
        if holder:
            holder.close()


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_input_is_one_line_exit_2_and_changes_nothing(case: Case, tmp_path, monkeypatch):
    result, before = run_case(case, tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.output, result.output
    assert lines[0].startswith("emojikit: error: ")
    for needle in case.needles:
        assert needle in lines[0], (needle, lines[0])
    assert SECRET not in result.output
    assert snapshot(tmp_path) == before  # nothing written, nothing overwritten


if __name__ == "__main__":  # print each case's exact error, to keep docs/errors.md in step
    import tempfile

    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
            result, _ = run_case(case, Path(tmp), mp)
            print(f"| {case.id} | `emojikit {' '.join(case.args)}` | `{result.output.strip()}` |")
