"""Interruption, proven on real subprocesses: `emojikit run` is stopped with SIGINT/SIGTERM
(it finishes the current write, saves, exits 130 with a resume hint), resumed, killed with
SIGKILL at a random moment, and resumed again to completion. Afterwards metrics.jsonl has
every step exactly once, and no dataset or checkpoint file is truncated.

Settings are tiny so each run takes seconds; OMP_NUM_THREADS=1 because the machine is shared.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from recipe_texts import GRPO_COMPONENTS, SFT

ROOT = Path(__file__).resolve().parents[1]
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "PYTHONUNBUFFERED": "1",
}
RNG = random.Random(int(os.environ.get("EMOJIKIT_KILL_SEED", time.time_ns() % 10**6)))


class Run:
    """One `emojikit run` subprocess; its output goes to a file (a full pipe would block it)."""

    def __init__(self, cwd: Path, *args: str):
        self.log = cwd / f"run-{time.monotonic_ns()}.log"
        self.out = open(self.log, "w")
        cmd = [sys.executable, "-m", "emojikit.ui.cli", "run", *args]
        self.proc = subprocess.Popen(cmd, cwd=cwd, env=ENV, stdout=self.out, stderr=subprocess.STDOUT)

    def wait_until(self, condition, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            if self.proc.poll() is not None:
                pytest.fail(f"the run ended (status {self.proc.returncode}) before the condition held:\n{self.output()[-3000:]}")
            if time.monotonic() > deadline:
                self.proc.kill()
                pytest.fail(f"timed out waiting:\n{self.output()[-3000:]}")
            time.sleep(0.05)

    def finish(self, timeout: float = 240.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.out.close()

    def output(self) -> str:
        if not self.out.closed:
            self.out.flush()
        return self.log.read_text(errors="replace")


def jsonl_lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []


def steps_logged(path: Path) -> list[int]:
    """Steps of the complete lines (a line cut by SIGKILL has no newline yet)."""
    return [json.loads(line)["step"] for line in jsonl_lines(path) if line.endswith("\n")]


def assert_intact_jsonl(path: Path) -> list[dict]:
    text = path.read_text(encoding="utf-8")
    assert text.endswith("\n"), f"{path} ends in a cut line"
    return [json.loads(line) for line in text.splitlines()]


def assert_checkpoints_intact(run_dir: Path) -> list[int]:
    """Every checkpoints/step_N loads: adapter tensors read in full, same sizes throughout."""
    from safetensors.torch import load_file

    steps, sizes = [], set()
    for path in sorted((run_dir / "checkpoints").glob("step_*")):
        step = int(path.name[5:])
        tensors = load_file(path / "adapter_model.safetensors")  # fails on a truncated file
        assert tensors and all(t.numel() for t in tensors.values())
        assert isinstance(json.loads((path / "trainer_state.json").read_text())["step"], int)  # optimizer steps taken
        optimizer = path / "optimizer.pt"  # absent while no optimizer step has been taken (GRPO groups all tied)
        sizes.add(((path / "adapter_model.safetensors").stat().st_size, optimizer.stat().st_size if optimizer.exists() else None))
        steps.append(step)
    assert len({a for a, _ in sizes}) == 1 and len({o for _, o in sizes} - {None}) <= 1, f"checkpoints differ in size: {sizes}"
    latest = json.loads((run_dir / "checkpoints" / "latest.json").read_text())
    assert latest["step"] == max(steps) and Path(latest["path"]).name == f"step_{max(steps)}"
    return sorted(steps)


def interrupt(run: Run, sig: signal.Signals) -> str:
    run.proc.send_signal(sig)
    status = run.finish(120)
    output = run.output()
    assert status == 130, output[-3000:]
    assert "--resume" in output and "Traceback" not in output, output[-3000:]
    return output


def kill_at_random(run: Run, condition) -> float:
    """SIGKILL at a random moment after `condition` holds (maybe mid-write, mid-checkpoint)."""
    run.wait_until(condition)
    delay = RNG.uniform(0.0, 1.5)
    time.sleep(delay)
    run.proc.kill()
    assert run.finish(60) == -signal.SIGKILL
    return delay


# --- SFT ---------------------------------------------------------------------------------------


def chat(i: int) -> dict:
    return {"messages": [{"role": "system", "content": "Reply with emoji."}, {"role": "user", "content": f"news number {i} about pizza"}, {"role": "assistant", "content": "🍕🎉"}]}


SFT_RECIPE = SFT + """batch_size = 2
steps = {steps}
save_every = 2
eval_every = 0
sample_every = 0
report_examples = 0
"""


def test_sft_sigterm_then_kill9_resumes_to_completion(tmp_path):
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(chat(i), ensure_ascii=False) + "\n" for i in range(40)), encoding="utf-8")
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(chat(i), ensure_ascii=False) + "\n" for i in range(40, 44)), encoding="utf-8")
    steps = 14
    (tmp_path / "sft.toml").write_text(SFT_RECIPE.format(steps=steps), encoding="utf-8")
    run_dir, metrics = tmp_path / "run", tmp_path / "run" / "metrics.jsonl"

    first = Run(tmp_path, "sft.toml")
    first.wait_until(lambda: len(steps_logged(metrics)) >= 3)
    output = interrupt(first, signal.SIGTERM)
    stopped_at = steps_logged(metrics)[-1]
    assert f"after step {stopped_at} (checkpoint saved)" in output and "emojikit run sft.toml --resume" in output
    assert (run_dir / "checkpoints" / f"step_{stopped_at}").is_dir()  # saved on the way out, even off save_every

    second = Run(tmp_path, "sft.toml", "--resume")
    delay = kill_at_random(second, lambda: steps_logged(metrics)[-1:] >= [stopped_at + 2])
    assert f"resuming from" in second.output()

    third = Run(tmp_path, "sft.toml", "--resume")
    assert third.finish() == 0, third.output()[-3000:]
    rows = assert_intact_jsonl(metrics)
    assert [r["step"] for r in rows] == list(range(1, steps + 1)), f"killed {delay:.2f}s in"
    assert assert_checkpoints_intact(run_dir)[-1] == steps


# --- GRPO --------------------------------------------------------------------------------------

GRPO_RECIPE = 'kind = "grpo"\nname = "grpo"\nout = "run"\n' + GRPO_COMPONENTS + """[game]
max_turns = 1
max_new_tokens = 4
[grpo]
steps = 6
batch_size = 2
group_size = 2
eval_targets = 2
start_from = "base"
save_every = 2
target_pool = 16
"""


def test_grpo_sigint_then_kill9_resumes_to_completion(tmp_path):
    (tmp_path / "grpo.toml").write_text(GRPO_RECIPE, encoding="utf-8")
    run_dir, metrics = tmp_path / "run", tmp_path / "run" / "metrics.jsonl"

    first = Run(tmp_path, "grpo.toml")
    first.wait_until(lambda: len(steps_logged(metrics)) >= 1)
    output = interrupt(first, signal.SIGINT)
    stopped_at = steps_logged(metrics)[-1]
    assert f"stopped by SIGINT after step {stopped_at}" in output
    assert (run_dir / "checkpoints" / f"step_{stopped_at}").is_dir()

    second = Run(tmp_path, "grpo.toml", "--resume")
    delay = kill_at_random(second, lambda: steps_logged(metrics)[-1:] >= [stopped_at + 2])

    third = Run(tmp_path, "grpo.toml", "--resume")
    assert third.finish() == 0, third.output()[-3000:]
    rows = assert_intact_jsonl(metrics)
    assert [r["step"] for r in rows] == list(range(1, 7)), f"killed {delay:.2f}s in"
    episodes = assert_intact_jsonl(run_dir / "episodes.jsonl")
    assert sorted({e["step"] for e in episodes}) == list(range(1, 7))
    assert len(episodes) == 6 * 2 * 2  # log_groups=2 groups of 2 per step, none twice
    assert [r["step"] for r in assert_intact_jsonl(run_dir / "eval.jsonl")] == [0, 6]
    assert assert_checkpoints_intact(run_dir)[-1] == 6
    assert (run_dir / "before_after.md").read_text().startswith("Held-out game")


# --- data generation ---------------------------------------------------------------------------

DATA_ARGS = ["--set", "data.count=160", "--set", "data.teacher_batch=4", "--set", "data.rl_count=10"]
DATA_FILES = ("sft_train.jsonl", "sft_test.jsonl", "rl_prompts.jsonl", "rl_heldout.jsonl")


def test_data_sigterm_then_kill9_resumes_to_the_same_dataset(tmp_path):
    recipe = str(ROOT / "recipes" / "data.toml")
    progress = tmp_path / "run" / "teacher_progress.jsonl"

    first = Run(tmp_path, recipe, "--set", "out=run", *DATA_ARGS)
    first.wait_until(lambda: len(jsonl_lines(progress)) >= 2)
    output = interrupt(first, signal.SIGTERM)
    assert "answers saved" in output
    done = len(jsonl_lines(progress))
    assert done < 40 and all(line.endswith("\n") for line in jsonl_lines(progress))  # stopped after a whole chunk
    assert not (tmp_path / "run" / "sft_train.jsonl").exists()

    second = Run(tmp_path, recipe, "--set", "out=run", *DATA_ARGS, "--resume")
    kill_at_random(second, lambda: len(jsonl_lines(progress)) >= done + 2)

    third = Run(tmp_path, recipe, "--set", "out=run", *DATA_ARGS, "--resume")
    assert third.finish() == 0, third.output()[-3000:]
    chunks = assert_intact_jsonl(progress)  # a line cut by SIGKILL was dropped on resume
    asked = [t for c in chunks for t in c["texts"]]
    assert len(asked) == len(set(asked)) == 160  # every message answered once, none asked twice

    reference = Run(tmp_path, recipe, "--set", "out=reference", *DATA_ARGS)
    assert reference.finish() == 0, reference.output()[-3000:]
    for name in DATA_FILES:
        resumed = assert_intact_jsonl(tmp_path / "run" / name)
        assert resumed == assert_intact_jsonl(tmp_path / "reference" / name), name
    assert json.loads((tmp_path / "run" / "data_stats.json").read_text())["sft_messages"] == 160
