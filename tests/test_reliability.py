"""Reliability, round two (issue 20): bad paths and files, damaged checkpoints, what validation
must catch, run directories, through the real CLI. Each case: exit status 2, one error line
(`emojikit: error: ...`) on stderr, no traceback, and the state of the run directory checked.

`python tests/test_reliability.py` prints each case's exact error, for docs/errors.md.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

import pytest
from click.testing import CliRunner

from emojikit.ui.cli import cli
from recipe_texts import SFT, jsonl

REPO = Path(__file__).resolve().parents[1]
RECIPES = REPO / "recipes"
SECRET = "sk-ant-pasted-into-a-name-0123456789"


def chat(i: int, answer: str = "🍕🎉") -> dict:
    return {"messages": [{"role": "system", "content": "Reply with 2-8 emoji only."}, {"role": "user", "content": f"news number {i}"}, {"role": "assistant", "content": answer}]}



DATA = """kind = "data"
out = "run"
[prompts]
use = "jsonl"
path = "prompts.jsonl"
[teacher]
use = "lexicon"
[data]
count = 6
rl_count = 2
test_fraction = 0.0
teacher_batch = 3
"""


def fake_adapter(path: Path, weights: Optional[bytes] = None, config: str = '{"peft_type": "LORA", "r": 4}') -> Path:
    """A checkpoint directory in the local backend's layout (files only; no model needed)."""
    path.mkdir(parents=True, exist_ok=True)
    if weights is None:
        header = json.dumps({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}).encode()
        weights = struct.pack("<Q", len(header)) + header + b"\0" * 8
    (path / "adapter_model.safetensors").write_bytes(weights)
    (path / "adapter_config.json").write_text(config)
    return path


def read_only(monkeypatch, root: Path) -> None:
    """Simulate a read-only location at `root` (the tests run as root, where chmod does not bind):
    creating anything under it fails with EROFS at the os boundary."""
    root = str(root.resolve())
    real_open, real_mkdir = os.open, os.mkdir

    def under(p) -> bool:
        return os.path.abspath(os.fspath(p)).startswith(root)

    def guarded_open(p, flags, *args, **kwargs):
        if under(p) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(p))
        return real_open(p, flags, *args, **kwargs)

    def guarded_mkdir(p, *args, **kwargs):
        if under(p):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.fspath(p))
        return real_mkdir(p, *args, **kwargs)

    monkeypatch.setattr(os, "open", guarded_open)
    monkeypatch.setattr(os, "mkdir", guarded_mkdir)


def a_run_with_metrics(tmp: Path, monkeypatch) -> None:
    (tmp / "done").mkdir()
    (tmp / "done" / "recipe.toml").write_text(SFT)
    (tmp / "done" / "metrics.jsonl").write_text(jsonl([{"step": 1, "loss": 2.0}, {"step": 2, "loss": 1.5}]))
    (tmp / "ro").mkdir()
    read_only(monkeypatch, tmp / "ro")


def ro_dir(tmp: Path, monkeypatch) -> None:
    (tmp / "ro").mkdir()
    read_only(monkeypatch, tmp / "ro")


def a_dir(tmp: Path, monkeypatch) -> None:
    (tmp / "adir").mkdir()


def damaged_resume(tmp: Path, monkeypatch) -> None:
    """A run directory with an intact step_1 and a step_2 whose optimizer state is corrupt."""
    run = tmp / "run"
    run.mkdir()
    (run / "recipe.toml").write_text(SFT)
    (run / "metrics.jsonl").write_text(jsonl([{"step": 1}, {"step": 2}]))
    fake_adapter(run / "checkpoints" / "step_1")
    fake_adapter(run / "checkpoints" / "step_2")
    (run / "checkpoints" / "step_2" / "optimizer.pt").write_bytes(b"PK\x03\x04 cut short")


def plugins_env(tmp: Path, monkeypatch) -> None:
    import emojikit.composition.registry as registry

    monkeypatch.setattr(registry, "_default", None)
    monkeypatch.setenv("EMOJIKIT_PLUGINS", "text,no-such-plugin")


@dataclass
class Case:
    id: str
    args: list[str]
    needles: list[str]
    setup: Optional[Callable[[Path, pytest.MonkeyPatch], None]] = None
    files: dict[str, str | bytes] = field(default_factory=dict)
    run_dir: str = "absent"  # after the command: "absent" | "unchanged"
    exit_code: int = 2


TRUNCATED = b"\x20\x00\x00\x00\x00\x00\x00\x00" + b'{"w": {"dtype": "F32", "shape": [2'  # header cut short
BIG_LINE = '{"text": "' + "x" * 50_000_000 + '"}\n'
EIGHT = "🍕" * 9

CASES = [
    # paths and files
    Case("recipe-is-a-directory", ["run", "adir"], ["adir: is a directory, expected a recipe file"], setup=a_dir),
    Case("train-file-is-a-directory", ["run", "sft.toml", "--set", "sft.train_file=adir"], ["[sft] train_file: adir: is a directory, expected a JSONL file"], setup=a_dir),
    Case("prompts-jsonl-is-a-directory", ["run", "data.toml", "--set", "prompts.path=adir"], ["[prompts] path: adir is a directory, expected a file"], setup=a_dir),
    Case("eval-targets-is-a-directory", ["eval", "--recipe", str(RECIPES / "eval.toml"), "--targets", "adir", "--out", "run"], ["[eval] targets_file: adir is a directory, expected a file"], setup=a_dir),
    Case("out-is-a-file", ["run", "sft.toml", "--set", "out=train.jsonl"], ["train.jsonl: is a file, expected a run directory"]),
    Case("run-dir-read-only", ["run", "data.toml", "--set", "out=ro/run"], ["ro/run: read-only file system while creating the run directory"], setup=ro_dir),
    Case("report-out-read-only", ["report", "done", "--out", "ro/report"], ["ro/report: read-only file system"], setup=a_run_with_metrics),
    Case("mask-export-read-only", ["mask", "--export", "ro/mask.npz"], ["ro: read-only file system while checking the --export location"], setup=ro_dir),
    Case("prompts-not-utf8", ["run", "data.toml"], ["[prompts] prompts.jsonl:2: not UTF-8 text (byte 0xe9 at column 14)"],
         files={"prompts.jsonl": b'{"text": "hello"}\n{"text": "caf\xe9"}\n'}),
    Case("targets-not-utf8", ["eval", "--recipe", str(RECIPES / "eval.toml"), "--targets", "targets.txt", "--out", "run"], ["targets.txt:3: not UTF-8 text"],
         files={"targets.txt": b"hello there\nsee you\ncaf\xe9 time\n"}),
    # checkpoints, checked when named
    Case("checkpoint-weights-empty", ["eval-sft", "--recipe", "sft.toml", "--checkpoint", "ckpt"], ["ckpt/adapter_model.safetensors: empty file"],
         setup=lambda t, m: fake_adapter(t / "ckpt", weights=b"")),
    Case("checkpoint-weights-truncated", ["eval-sft", "--recipe", "sft.toml", "--checkpoint", "ckpt"], ["ckpt/adapter_model.safetensors: truncated"],
         setup=lambda t, m: fake_adapter(t / "ckpt", weights=TRUNCATED)),
    Case("checkpoint-config-invalid", ["eval-sft", "--recipe", "sft.toml", "--checkpoint", "ckpt"], ["ckpt/adapter_config.json: not valid JSON"],
         setup=lambda t, m: fake_adapter(t / "ckpt", config='{"peft_type": "LORA",')),
    Case("resume-corrupt-optimizer", ["run", "sft.toml", "--resume"],
         ["run/checkpoints/step_2/optimizer.pt: corrupt", "the last checkpoint (step_2) is damaged, run/checkpoints/step_1 is intact"],
         setup=damaged_resume, run_dir="unchanged"),
    # validation
    Case("seed-out-of-range", ["validate", "sft.toml", "--set", "seed=-1"], ["seed: -1 is out of range; expected 0 to 4294967295"]),
    Case("content-null", ["validate", "sft.toml"], ["train.jsonl:2: message 2 (user): content must be a string, got null"],
         files={"train.jsonl": jsonl([chat(0), {"messages": [{"role": "system", "content": "s"}, {"role": "user", "content": None}, {"role": "assistant", "content": "🍕🎉"}]}])}),
    Case("content-integer", ["validate", "sft.toml"], ["train.jsonl:1: message 3 (assistant): content must be a string, got 7"],
         files={"train.jsonl": jsonl([{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "x"}, {"role": "assistant", "content": 7}]}])}),
    Case("roles-out-of-order", ["validate", "sft.toml"], ["train.jsonl:1: roles user, user, assistant: expected an optional system message, then user and assistant alternating"],
         files={"train.jsonl": jsonl([{"messages": [{"role": "user", "content": "hi"}, {"role": "user", "content": "x"}, {"role": "assistant", "content": "🍕🎉"}]}])}),
    Case("empty-answer", ["validate", "sft.toml"], ["train.jsonl:3: empty assistant answer"], files={"train.jsonl": jsonl([chat(0), chat(1), chat(2, "  ")])}),
    Case("answers-outside-the-format", ["validate", "sft.toml"],
         ["[sft] train_file: 2 of 4 answers (50.0%) are not 2-8 emoji only (first at train.jsonl:2), over [sft] max_invalid_answers = 0.05"],
         files={"train.jsonl": jsonl([chat(0), chat(1, "pizza!"), chat(2), chat(3, EIGHT)])}),
    Case("line-of-50-mb", ["run", "data.toml"], ["[prompts] prompts.jsonl:2: line of 50.0 MB, over the 1.0 MB limit of one line"],
         files={"prompts.jsonl": '{"text": "hello"}\n' + BIG_LINE}),
    Case("eval-sft-with-a-data-recipe", ["eval-sft", "--recipe", "data.toml"], ["data.toml: eval-sft needs an sft recipe", "got kind = 'data'"]),
    # a [data] count over a small source's size is not an error: the run uses every message (tests/test_data.py)
    Case("prompts-empty", ["validate", "data.toml"], ["data.toml: [prompts] the jsonl prompt source has no messages"], files={"prompts.jsonl": ""}),
    Case("examples-zero", ["eval-sft", "--recipe", "sft.toml", "-n", "0"], ["Invalid value for '-n' / '--examples': 0 is not in the range x>=1"]),
    Case("report-examples-negative", ["report", "done", "--examples", "-1"], ["'--examples': -1 is not in the range x>=0"]),
    Case("temperature-negative", ["chat", "--temperature", "-0.5"], ["'--temperature': -0.5 is not in the range 0.0<=x<=5.0"]),
    Case("message-empty", ["play", "--message", ""], ["'--message': empty message"]),
    # runs
    Case("resume-with-a-different-recipe", ["run", "sft.toml", "--resume", "--set", "seed=7", "--set", "sft.learning_rate=0.01"],
         ["run: --resume with a recipe that differs from the run's recorded recipe.toml: seed ((unset) -> 7); sft.learning_rate ((unset) -> 0.01)"],
         setup=damaged_resume, run_dir="unchanged"),
]


def snapshot(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file() and p.name != ".lock"}


def run_case(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.chdir(tmp_path)
    files = {
        "train.jsonl": jsonl(chat(i) for i in range(4)),
        "test.jsonl": jsonl(chat(i) for i in range(4, 6)),
        "prompts.jsonl": jsonl({"text": f"message number {i} about pizza"} for i in range(6)),
        "sft.toml": SFT,
        "data.toml": DATA,
        **case.files,
    }
    for name, content in files.items():
        (tmp_path / name).write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    if case.setup:
        case.setup(tmp_path, monkeypatch)
    before = snapshot(tmp_path / "run") if (tmp_path / "run").is_dir() else None
    result = CliRunner().invoke(cli, case.args, catch_exceptions=False)
    return result, before


def error_line(result) -> str:
    assert "Traceback" not in result.output, result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]  # progress bars may come first
    assert len(errors) == 1 and errors[0] == lines[-1], result.output
    assert errors[0].startswith("emojikit: error: "), errors[0]
    return errors[0]


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_bad_path_file_or_value_is_one_line_exit_2(case: Case, tmp_path, monkeypatch):
    result, before = run_case(case, tmp_path, monkeypatch)
    assert result.exit_code == case.exit_code, result.output
    line = error_line(result)
    for needle in case.needles:
        assert needle in line, (needle, line)
    if case.run_dir == "absent":
        assert not (tmp_path / "run").exists() and not (tmp_path / "ro" / "run").exists()
    else:
        assert snapshot(tmp_path / "run") == before  # recipe.toml and every checkpoint as they were


def test_unknown_name_in_emojikit_plugins_warns(tmp_path, monkeypatch):
    plugins_env(tmp_path, monkeypatch)
    with pytest.warns(UserWarning, match="EMOJIKIT_PLUGINS names 'no-such-plugin', which is not an installed plugin"):
        result = CliRunner().invoke(cli, ["list-plugins", "--kind", "teacher"], catch_exceptions=False)
    assert result.exit_code == 0 and "lexicon" in result.output


def test_the_command_prints_its_own_warnings_as_one_line(tmp_path):
    """The `emojikit` command (not CliRunner): emojikit's warning is one line a person reads, with
    no source path or Python warning class."""
    import subprocess
    import sys

    env = {**os.environ, "EMOJIKIT_PLUGINS": "text,no-such-plugin"}
    done = subprocess.run([sys.executable, "-m", "emojikit.ui.cli", "list-plugins", "--kind", "teacher"], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0 and "lexicon" in done.stdout, done.stderr
    lines = [line for line in done.stderr.splitlines() if "no-such-plugin" in line or "UserWarning" in line]
    assert len(lines) == 1 and lines[0].startswith("emojikit: warning: EMOJIKIT_PLUGINS names 'no-such-plugin'"), done.stderr


def test_describe_tracking_names_the_trackers_it_takes():
    result = CliRunner().invoke(cli, ["describe", "tracking"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("[tracking] in every recipe: use = ") and "tracker tensorboard" in result.output


def test_validate_warns_below_the_invalid_answer_threshold(tmp_path, monkeypatch):
    case = Case("warn", ["validate", "sft.toml", "--set", "sft.max_invalid_answers=0.5"], [], files={"train.jsonl": jsonl([chat(0), chat(1, "pizza!"), chat(2), chat(3)])})
    result, _ = run_case(case, tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert "emojikit: warning: sft.toml: [sft] train_file: 1 of 4 answers (25.0%) are not 2-8 emoji only (first at train.jsonl:2)" in result.stderr


def test_secret_value_pasted_into_a_field_is_redacted_in_recipe_toml(tmp_path, monkeypatch):
    """A key value (known from the environment) pasted into a non-secret field never reaches a
    file of the run directory, nor the output."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET)
    case = Case("secret", ["run", "data.toml", "--set", f"name=run-{SECRET}", "--set", "out=run"], [])
    result, _ = run_case(case, tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    recorded = (tmp_path / "run" / "recipe.toml").read_text()
    assert "run-<ANTHROPIC_API_KEY>" in recorded
    for p in (tmp_path / "run").rglob("*"):
        if p.is_file():
            assert SECRET.encode() not in p.read_bytes(), p
    assert SECRET not in result.output


def enospc_on(monkeypatch, fragment: str) -> None:
    """Writes (os.write, and the fsync that ends a buffered write) to a file whose path contains
    `fragment` fail as on a full disk."""
    real_write, real_fsync = os.write, os.fsync

    def full(fd) -> bool:
        return fragment in os.readlink(f"/proc/self/fd/{fd}")

    def write(fd, data):
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    def fsync(fd):
        if full(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_fsync(fd)

    monkeypatch.setattr(os, "write", write)
    monkeypatch.setattr(os, "fsync", fsync)


def test_full_disk_while_writing_data_keeps_progress_and_resumes(tmp_path, monkeypatch):
    case = Case("enospc", ["run", "data.toml", "--set", "data.teacher_batch=3"], [])
    with monkeypatch.context() as m:
        enospc_on(m, ".sft_train.jsonl.")
        result, _ = run_case(case, tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert "run/sft_train.jsonl: no space left on device while writing sft_train.jsonl" in error_line(result)
    run = tmp_path / "run"
    progress = [json.loads(line) for line in (run / "teacher_progress.jsonl").read_text().splitlines()]
    assert sum(len(r["texts"]) for r in progress) == 6  # what was written before stays intact
    assert not (run / "sft_train.jsonl").exists() and not list(run.glob(".*.tmp"))
    # Resumable, and the teacher is not asked again: every chunk comes from the progress file.
    resumed = CliRunner().invoke(cli, ["run", "data.toml", "--set", "data.teacher_batch=3", "--resume"], catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    assert len((run / "sft_train.jsonl").read_text().splitlines()) == 6
    assert (run / "teacher_progress.jsonl").read_text().count("\n") == 2


def test_an_error_right_after_the_run_directory_was_made_does_not_block_a_plain_rerun(tmp_path, monkeypatch):
    """The run fails before any progress (a full disk on the first teacher chunk): a plain
    re-run of the same command is not refused because of the directory it left."""
    case = Case("rerun", ["run", "data.toml"], [])
    with monkeypatch.context() as m:
        enospc_on(m, "teacher_progress.jsonl")
        result, _ = run_case(case, tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    assert "run/teacher_progress.jsonl: no space left on device while writing teacher_progress.jsonl" in error_line(result)
    assert not (tmp_path / "run" / "teacher_progress.jsonl").read_bytes()  # no progress: nothing answered is on file
    again = CliRunner().invoke(cli, ["run", "data.toml"], catch_exceptions=False)
    assert again.exit_code == 0, again.output
    assert (tmp_path / "run" / "sft_train.jsonl").exists()


def test_a_run_that_fails_on_bad_input_before_its_first_output_leaves_no_directory(tmp_path):
    from emojikit.api.errors import ConfigError, PluginError
    from emojikit.stages.runs import RunDir

    for error in (ConfigError("[judge] bad"), PluginError("[judge] judge 'x' (plugin 'y'): factory failed: KeyError: 'w'")):
        with pytest.raises(type(error)):
            with RunDir(tmp_path / "runs" / "eval", recipe_toml='kind = "eval"\n') as run_dir:
                run_dir.file("code.json").write_text("{}")
                raise error
        assert not (tmp_path / "runs" / "eval").exists()
    # What a run wrote of its own stays, and so does a directory that was there before it.
    with pytest.raises(ConfigError):
        with RunDir(tmp_path / "kept", recipe_toml="x = 1\n") as run_dir:
            run_dir.file("eval.jsonl").write_text("{}\n")
            raise ConfigError("late")
    assert (tmp_path / "kept" / "eval.jsonl").exists()
    (tmp_path / "mine").mkdir()
    with pytest.raises(ConfigError):
        with RunDir(tmp_path / "mine", recipe_toml="x = 1\n"):
            raise ConfigError("early")
    assert (tmp_path / "mine").is_dir()
    with pytest.raises(RuntimeError):  # a bug, not bad input: the directory stays to be looked at
        with RunDir(tmp_path / "bug", recipe_toml="x = 1\n"):
            raise RuntimeError("bug")
    assert (tmp_path / "bug" / "recipe.toml").exists()


if __name__ == "__main__":  # print each case's exact error, to keep docs/errors.md in step
    import tempfile

    for case in CASES:
        with tempfile.TemporaryDirectory() as tmp, pytest.MonkeyPatch.context() as mp:
            result, _ = run_case(case, Path(tmp), mp)
            print(f"| {case.id} | `emojikit {' '.join(case.args)}` | `{result.stderr.strip()[:300]}` |")


def test_token_budget_too_small_for_min_emoji_is_a_validation_error(tmp_path, monkeypatch):
    """SmolLM2's tokenizer needs 4 tokens for two emoji: a 3-token budget could only ever give
    empty answers, so validation refuses it (before any model loads, no run directory)."""
    recipe = SFT + '[decoder]\nuse = "emoji-mask"\n'
    case = Case("budget", ["run", "sft.toml", "--set", "sft.max_new_tokens=3"], [], files={"sft.toml": recipe})
    result, _ = run_case(case, tmp_path, monkeypatch)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert "[sft] max_new_tokens: 3 tokens cannot hold the decoder's min_emoji=2 emoji under the tokenizer of bundled:smollm2-135m-instruct (the fewest is 4 tokens" in line
    assert not (tmp_path / "run").exists()
    ok = CliRunner().invoke(cli, ["validate", "sft.toml", "--set", "sft.max_new_tokens=4"], catch_exceptions=False)
    assert ok.exit_code == 0, ok.output


# --- chat stdin that is not UTF-8 ---------------------------------------------------------------


NOT_UTF8_STDIN = b"hello there\ncaf\xe9 time\n"
STDIN_ERROR = "emojikit: error: stdin line 2: not valid UTF-8 (byte 0xe9 at column 4)"


def chat_args(tiny_model: Path) -> list[str]:
    # No recipe in the working directory: the default components, the tiny model, no decoder mask.
    return ["chat", "--decoder", "none", "--seed", "0", "--set", f"backend.model={json.dumps(str(tiny_model))}"]


def test_chat_stdin_not_utf8_is_one_line_naming_the_stdin_line(tiny_model, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, chat_args(tiny_model), input=NOT_UTF8_STDIN, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    assert error_line(result) == STDIN_ERROR
    assert result.stdout.count("emoji> ") == 1  # line 1 was answered before line 2 was read


def test_chat_stdin_not_utf8_from_a_pipe(tiny_model, tmp_path):
    """The real process reading a pipe in UTF-8 mode, where sys.stdin's error handler is
    surrogateescape and would otherwise pass the bad bytes on to the model."""
    import subprocess
    import sys

    env = {**os.environ, "PYTHONUTF8": "1", "LC_ALL": "C.UTF-8", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.pop("PYTHONIOENCODING", None)
    ran = subprocess.run([sys.executable, "-m", "emojikit.ui.cli", *chat_args(tiny_model)], input=NOT_UTF8_STDIN,
                         capture_output=True, cwd=tmp_path, env=env, timeout=300)
    stderr = ran.stderr.decode("utf-8", "replace")
    assert ran.returncode == 2, stderr
    assert "Traceback" not in stderr
    assert [line for line in stderr.splitlines() if line.strip()][-1] == STDIN_ERROR
    assert stderr.count("error") == 1


# --- a full disk during a real checkpoint save ----------------------------------------------------


def fill_disk_at_step_4(monkeypatch, which: str) -> None:
    """The bytes of one checkpoint file of step_4 meet a full disk, at the library that writes
    them: optimizer and RNG state through torch.save into /dev/full (the kernel's ENOSPC), the
    adapter weights as safetensors reports a full disk (its own error, not an OSError)."""
    if which == "adapter_model.safetensors":
        import peft.peft_model
        from safetensors import SafetensorError

        real = peft.peft_model.safe_save_file

        def save_file(tensors, filename, *args, **kwargs):
            if ".step_4.tmp" in str(filename):
                Path(filename).write_bytes(b"\0" * 16)  # what got out before the disk filled up
                raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")
            return real(tensors, filename, *args, **kwargs)

        monkeypatch.setattr(peft.peft_model, "safe_save_file", save_file)
        return
    import torch

    real_save = torch.save

    def save(obj, f, *args, **kwargs):
        if ".step_4.tmp" in str(getattr(f, "name", f)) and str(getattr(f, "name", f)).endswith(which):
            with open("/dev/full", "wb") as full:
                return real_save(obj, full, *args, **kwargs)
        return real_save(obj, f, *args, **kwargs)

    monkeypatch.setattr(torch, "save", save)


@pytest.mark.parametrize("which", ["adapter_model.safetensors", "optimizer.pt"])
def test_full_disk_while_saving_a_checkpoint_keeps_the_earlier_ones_and_resumes(tiny_model, tmp_path, monkeypatch, which):
    from emojikit.composition.preflight import check_checkpoint_files

    monkeypatch.chdir(tmp_path)
    (tmp_path / "train.jsonl").write_text(jsonl(chat(i) for i in range(8)))
    (tmp_path / "test.jsonl").write_text(jsonl(chat(i) for i in range(8, 10)))
    (tmp_path / "sft.toml").write_text(SFT)  # out = "run", train.jsonl and test.jsonl, the local backend
    args = ["run", "sft.toml", "--set", f"backend.model={json.dumps(str(tiny_model))}", "--set", "sft.steps=4",
            "--set", "sft.batch_size=2", "--set", "sft.save_every=2", "--set", "sft.eval_every=0", "--set", "sft.sample_every=0",
            "--set", "sft.report_examples=0", "--set", "sft.max_new_tokens=6"]
    with monkeypatch.context() as m:
        fill_disk_at_step_4(m, which)
        result = CliRunner().invoke(cli, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    line = error_line(result)
    assert line.startswith(f"emojikit: error: run/checkpoints/step_4/{which}: no space left on device while saving checkpoint step_4; "
                           "the earlier checkpoints are intact (free the space, then resume with: emojikit run "), line
    assert line.endswith("--resume)"), line
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["latest.json", "step_2"]  # no step_4, no temporary folder
    check_checkpoint_files(checkpoints / "step_2", resuming=True)  # intact, optimizer state included
    assert json.loads((checkpoints / "latest.json").read_text())["step"] == 2

    resumed = CliRunner().invoke(cli, args + ["--resume"], catch_exceptions=False)
    assert resumed.exit_code == 0, resumed.output
    assert "resuming from run/checkpoints/step_2 (step 2)" in resumed.output
    assert [json.loads(r)["step"] for r in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()] == [1, 2, 3, 4]
    check_checkpoint_files(checkpoints / "step_4", resuming=True)
