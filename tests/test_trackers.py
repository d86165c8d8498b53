"""Trackers (docs/trackers.md): a small GRPO run sent to TensorBoard, trackio, W&B (offline)
and MLflow (file store), each read back with the tracker's own reader and compared with
metrics.jsonl; kill -9 then resume leaves one tracker run with every step once; a tracker that
fails warns once and the run goes on; code.json; the W&B key never lands in a run directory.

Each tracker's library is an optional extra (`pip install 'emojikit[trackers]'`; bin/test
installs it when missing): its tests skip without it. Nothing here uses the network: W&B is
offline, trackio and MLflow write local stores, and no tracker is given an address.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from emojikit.ui.cli import cli

ROOT = Path(__file__).resolve().parents[1]
LIBRARIES = {"tensorboard": "tensorboard", "trackio": "trackio", "wandb": "wandb", "mlflow": "mlflow"}
INSTALLED = [name for name, module in LIBRARIES.items() if importlib.util.find_spec(module) is not None]
EXTRA = "install them with: pip install 'emojikit[trackers]' (bin/test does)"

GRPO_RECIPE = """kind = "grpo"
name = "grpo"
out = "run"
[backend]
use = "local"
model = {model}
[decoder]
use = "none"
[judge]
use = "retrieval"
distractors = 8
[reward]
use = "similarity"
[prompts]
use = "generated"
[game]
max_turns = 2
max_new_tokens = 6
[grpo]
steps = {steps}
batch_size = 2
group_size = 2
eval_targets = 2
eval_every = 2
start_from = "base"
save_every = 2
target_pool = 16
compare = false
"""


def tracker_env(tmp_path: Path, **extra: str) -> dict:
    """The environment of a run: offline, one thread, trackio's store in tmp_path, no W&B or
    trackio variable from the developer's shell (a key would make W&B go online)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("WANDB_", "TRACKIO_", "MLFLOW_"))}
    env.update(OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1",
               TRACKIO_DIR=str(tmp_path / "trackio"), WANDB_SILENT="true", **extra)
    return env


def emojikit_run(tmp_path: Path, *args: str, env: dict | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "emojikit.ui.cli", "run", *args], cwd=tmp_path, env=env or tracker_env(tmp_path),
                          capture_output=True, text=True, timeout=timeout)


def write_recipe(tmp_path: Path, tiny_model: Path, steps: int) -> Path:
    (tmp_path / "grpo.toml").write_text(GRPO_RECIPE.format(steps=steps, model=json.dumps(str(tiny_model))), encoding="utf-8")
    return tmp_path / "grpo.toml"


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def expected_series(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """What every tracker must hold: each numeric key of metrics.jsonl at its steps, and each of
    eval.jsonl as heldout/<key>."""
    series: dict[str, list[tuple[int, float]]] = {}
    for file, prefix in (("metrics.jsonl", ""), ("eval.jsonl", "heldout/")):
        for row in read_rows(run_dir / file):
            for key, value in row.items():
                if key != "step" and isinstance(value, (int, float)):
                    series.setdefault(prefix + key, []).append((row["step"], float(value)))
    return series


def assert_same_series(got: dict[str, list[tuple[int, float]]], want: dict[str, list[tuple[int, float]]], tracker: str) -> None:
    assert set(got) == set(want), f"{tracker}: keys differ: missing {sorted(set(want) - set(got))}, extra {sorted(set(got) - set(want))}"
    for key in want:
        assert [s for s, _ in got[key]] == [s for s, _ in want[key]], f"{tracker} {key}: steps {got[key]} != {want[key]}"
        assert [v for _, v in got[key]] == pytest.approx([v for _, v in want[key]], rel=1e-6, abs=1e-9), f"{tracker} {key}"


def state(run_dir: Path) -> dict:
    return json.loads((run_dir / "trackers" / "state.json").read_text(encoding="utf-8"))


# --- readers: each tracker's own ------------------------------------------------------------------


def tensorboard_series(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "trackers" / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    events.Reload()
    return {tag: [(e.step, e.value) for e in events.Scalars(tag)] for tag in events.Tags()["scalars"]}


def trackio_series(tmp_path: Path, run_name: str) -> dict[str, list[tuple[int, float]]]:
    code = ("import json, sys\nfrom trackio.sqlite_storage import SQLiteStorage\n"
            "print(json.dumps({'runs': SQLiteStorage.get_runs('emojikit'), 'logs': SQLiteStorage.get_logs('emojikit', sys.argv[1])}, default=str))")
    # In a child process: trackio reads TRACKIO_DIR once, when first imported.
    out = subprocess.run([sys.executable, "-c", code, run_name], env=tracker_env(tmp_path), capture_output=True, text=True, timeout=120, check=True).stdout
    data = json.loads(out.strip().splitlines()[-1])
    assert data["runs"] == [run_name], data["runs"]  # one trackio run
    series: dict[str, list[tuple[int, float]]] = {}
    for row in sorted(data["logs"], key=lambda r: r["step"]):
        for key, value in row.items():
            if key not in ("step", "timestamp") and not key.startswith("tables/") and isinstance(value, (int, float)):
                series.setdefault(key, []).append((row["step"], float(value)))
    return series


def wandb_records(run_dir: Path) -> list[dict]:
    """Every record of every offline run folder, read by wandb's own reader (wandb leet inspect)."""
    wandb_cli = Path(sys.executable).with_name("wandb")
    records = []
    for path in sorted((run_dir / "trackers" / "wandb").glob("offline-run-*/run-*.wandb")):
        out = subprocess.run([str(wandb_cli), "leet", "inspect", "--json", str(path)], capture_output=True, text=True, timeout=120, check=True).stdout
        records += [json.loads(line) for line in out.splitlines() if line.strip()]
    return records


def wandb_series(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    series: dict[str, list[tuple[int, float]]] = {}
    for record in wandb_records(run_dir):
        if record.get("type") != "history":
            continue
        step = int(record["history"]["step"]["num"])
        for key, value in record["history"]["item"].items():
            if not key.startswith(("_", "tables/")) and isinstance(value, (int, float)):
                series.setdefault(key, []).append((step, float(value)))
    return series


def mlflow_client(tmp_path: Path):
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"  # reading the file store the tracker wrote
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=(tmp_path / "mlruns").resolve().as_uri())


def mlflow_series(tmp_path: Path, run_id: str) -> dict[str, list[tuple[int, float]]]:
    client = mlflow_client(tmp_path)
    experiment = client.get_experiment_by_name("emojikit")
    assert [r.info.run_id for r in client.search_runs([experiment.experiment_id])] == [run_id]  # one MLflow run
    keys = client.get_run(run_id).data.metrics
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run_id, key)) for key in keys}


# --- one GRPO run, every installed tracker ----------------------------------------------------------


@pytest.fixture(scope="module")
def tracked_run(tmp_path_factory, tiny_model):
    if not INSTALLED:
        pytest.skip(f"no tracker library is installed; {EXTRA}")
    tmp_path = tmp_path_factory.mktemp("tracked")
    write_recipe(tmp_path, tiny_model, steps=4)
    flags = [arg for name in INSTALLED for arg in ("--tracker", name)]
    done = emojikit_run(tmp_path, "grpo.toml", *flags)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return tmp_path, done


def test_grpo_metrics_hold_every_reward_part_and_code_json(tracked_run):
    tmp_path, _ = tracked_run
    run_dir = tmp_path / "run"
    rows = read_rows(run_dir / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    episodes = read_rows(run_dir / "episodes.jsonl")
    parts = {k for ep in episodes for k in ep["reward"] if k != "total"}
    assert parts, "the similarity reward has a breakdown"
    for row in rows:
        for part in parts:
            assert f"reward/{part}_mean" in row and f"reward/{part}_std" in row
    # A step's part mean is the mean over the step's kept episodes; the logged groups are some of them.
    code = json.loads((run_dir / "code.json").read_text())
    import emojikit

    assert code["emojikit"] == emojikit.__version__
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    diff = subprocess.run(["git", "-C", str(ROOT), "diff", "HEAD", "--binary"], capture_output=True).stdout
    assert code["git"]["commit"] == head and code["git"]["dirty"] == bool(diff)
    assert {"plugin": "trackers", "distribution": "emojikit", "version": emojikit.__version__} in code["plugins"]
    result = CliRunner().invoke(cli, ["inspect", str(run_dir), "--worst", "1"])
    assert result.exit_code == 0 and f"code: emojikit {emojikit.__version__}, git {head[:8]}" in result.output, result.output
    result = CliRunner().invoke(cli, ["report", str(run_dir), "--out", str(tmp_path / "report")])
    assert result.exit_code == 0 and f"git {head[:8]}" in (tmp_path / "report" / "report.md").read_text()


def test_tensorboard_event_files_equal_metrics_jsonl(tracked_run):
    pytest.importorskip("tensorboard", reason=f"the tensorboard tracker's library; {EXTRA}")
    tmp_path, _ = tracked_run
    run_dir = tmp_path / "run"
    assert_same_series(tensorboard_series(run_dir), expected_series(run_dir), "tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(run_dir / "trackers" / "tensorboard"))
    events.Reload()
    texts = set(events.Tags()["tensors"])
    assert {"config/text_summary", "tables/heldout/text_summary", "tables/episodes/text_summary"} <= texts, texts
    config = events.Tensors("config/text_summary")[0].tensor_proto.string_val[0].decode()
    assert '"kind": "grpo"' in config and '"code"' in config


def test_trackio_local_store_equals_metrics_jsonl(tracked_run):
    pytest.importorskip("trackio", reason=f"the trackio tracker's library; {EXTRA}")
    tmp_path, _ = tracked_run
    run_dir = tmp_path / "run"
    name = state(run_dir)["trackio"]["id"]
    assert_same_series(trackio_series(tmp_path, name), expected_series(run_dir), "trackio")


def test_wandb_offline_folder_equals_metrics_jsonl(tracked_run):
    pytest.importorskip("wandb", reason=f"the wandb tracker's library; {EXTRA}")
    tmp_path, _ = tracked_run
    run_dir = tmp_path / "run"
    assert_same_series(wandb_series(run_dir), expected_series(run_dir), "wandb")
    records = wandb_records(run_dir)
    run = next(r["run"] for r in records if r.get("type") == "run")
    assert run["run_id"] == state(run_dir)["wandb"]["id"] and run["config"]["update"]["kind"] == "grpo"
    assert list((run_dir / "trackers" / "wandb").glob("offline-run-*/files/media/table/tables/episodes_*.table.json"))


def test_mlflow_file_store_equals_metrics_jsonl(tracked_run):
    pytest.importorskip("mlflow", reason=f"the mlflow tracker's library; {EXTRA}")
    tmp_path, _ = tracked_run
    run_dir = tmp_path / "run"
    run_id = state(run_dir)["mlflow"]["id"]
    assert_same_series(mlflow_series(tmp_path, run_id), expected_series(run_dir), "mlflow")
    client = mlflow_client(tmp_path)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.params["kind"] == "grpo" and run.data.params["grpo.steps"] == "4"
    artifacts = {a.path for a in client.list_artifacts(run_id, "tables")}
    assert {"tables/heldout.json", "tables/episodes.json"} <= artifacts, artifacts


def test_a_reused_stage_sends_nothing_twice(tracked_run, tiny_model):
    tmp_path, _ = tracked_run
    run_dir = tmp_path / "run"
    before = {p: p.stat().st_size for p in (run_dir / "trackers").rglob("*") if p.is_file()}
    state_before = state(run_dir)
    flags = [arg for name in INSTALLED for arg in ("--tracker", name)]
    done = emojikit_run(tmp_path, "grpo.toml", *flags)
    assert done.returncode == 0 and "reuse" in done.stdout and "nothing to run" in done.stdout, done.stdout + done.stderr
    after = {p: p.stat().st_size for p in (run_dir / "trackers").rglob("*") if p.is_file()}
    assert after == before and state(run_dir) == state_before


def test_which_trackers_watch_a_run_is_not_part_of_its_fingerprint(tracked_run):
    tmp_path, _ = tracked_run
    done = emojikit_run(tmp_path, "grpo.toml", "--dry-run")  # made with every tracker, planned with none
    assert done.returncode == 0 and "reuse run: finished run of the same recipe and inputs" in done.stdout, done.stdout + done.stderr


# --- kill -9, then the same command: one tracker run, every step once ------------------------------


def metrics_steps(path: Path) -> list[int]:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True) if path.exists() else []
    return [json.loads(line)["step"] for line in lines if line.endswith("\n")]


def test_kill9_then_resume_leaves_one_tracker_run_with_every_step_once(tmp_path, tiny_model):
    if not INSTALLED:
        pytest.skip(f"no tracker library is installed; {EXTRA}")
    write_recipe(tmp_path, tiny_model, steps=6)
    flags = [arg for name in INSTALLED for arg in ("--tracker", name)]
    run_dir, metrics = tmp_path / "run", tmp_path / "run" / "metrics.jsonl"
    log = open(tmp_path / "first.log", "w")
    first = subprocess.Popen([sys.executable, "-m", "emojikit.ui.cli", "run", "grpo.toml", *flags], cwd=tmp_path, env=tracker_env(tmp_path), stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 300
    while len(metrics_steps(metrics)) < 3:  # past the step-2 checkpoint, so the resume re-runs a sent step
        assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)
    first.send_signal(signal.SIGKILL)
    assert first.wait(60) == -signal.SIGKILL
    log.close()
    killed_at = metrics_steps(metrics)[-1]

    done = emojikit_run(tmp_path, "grpo.toml", *flags)  # the same command resumes the interrupted stage
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resume" in done.stdout and "Traceback" not in done.stderr
    assert metrics_steps(metrics) == [1, 2, 3, 4, 5, 6]
    want = list(range(1, 7))
    tracker_state = state(run_dir)
    if "tensorboard" in INSTALLED:
        assert [s for s, _ in tensorboard_series(run_dir)["step_seconds"]] == want, f"killed after step {killed_at}"
    if "trackio" in INSTALLED:
        assert [s for s, _ in trackio_series(tmp_path, tracker_state["trackio"]["id"])["step_seconds"]] == want
    if "wandb" in INSTALLED:
        assert [s for s, _ in wandb_series(run_dir)["step_seconds"]] == want
        ids = {r["run"]["run_id"] for r in wandb_records(run_dir) if r.get("type") == "run"}
        assert ids == {tracker_state["wandb"]["id"]}  # the resumed folder continues the same W&B run (wandb sync merges them)
    if "mlflow" in INSTALLED:
        assert [s for s, _ in mlflow_series(tmp_path, tracker_state["mlflow"]["id"])["step_seconds"]] == want
    # Every key of both files at its steps once: a step's held-out row and its metrics row are
    # separate writes, and a kill -9 can keep one of them only.
    expected = expected_series(run_dir)
    assert [s for s, _ in expected["heldout/success_rate"]] == [0, 2, 4, 6]
    readers = {"tensorboard": lambda: tensorboard_series(run_dir), "trackio": lambda: trackio_series(tmp_path, tracker_state["trackio"]["id"]),
               "wandb": lambda: wandb_series(run_dir), "mlflow": lambda: mlflow_series(tmp_path, tracker_state["mlflow"]["id"])}
    for name in INSTALLED:
        got = readers[name]()
        assert {key: [s for s, _ in got.get(key, [])] for key in expected} == {key: [s for s, _ in series] for key, series in expected.items()}, f"{name}, killed after step {killed_at}"
    # Values of the steps run once are metrics.jsonl's; a step re-run after the checkpoint keeps its first values.
    if "tensorboard" in INSTALLED:
        rows = {r["step"]: r for r in read_rows(metrics)}
        for step, value in tensorboard_series(run_dir)["reward_mean"]:
            if step <= 2:
                assert value == pytest.approx(rows[step]["reward_mean"], rel=1e-6)


TRACKIO_LOST_ROW = """
import json, sys
from pathlib import Path
import trackio
from trackio.sqlite_storage import SQLiteStorage
from emojikit import TrackedRun
from emojikit_trackers.trackio_tracker import TrackioConfig, TrackioTracker

run = trackio.init(project="emojikit", name="killed", embed=False, auto_log_gpu=False, auto_log_cpu=False)
run.log({"loss": 1.0}, step=1)
run.log({"heldout/success_rate": 0.5}, step=1)
run.log({"heldout/success_rate": 0.25}, step=2)  # step 2's metrics row was lost to the kill -9
run.finish()
tracker = TrackioTracker(TrackioConfig())
tracker.start(TrackedRun(name="grpo", kind="grpo", run_dir=Path("run"), config={}, resume_id="killed", resume_step=2))
stored = tracker.stored_step()
for step, loss, heldout in ((1, 9.0, 9.0), (2, 2.0, 9.0), (3, 3.0, None)):  # the rows up to the checkpoint, then a re-run step
    tracker.log_metrics({"loss": loss}, step)
    if heldout is not None:
        tracker.log_metrics({"heldout/success_rate": heldout}, step)
tracker.finish("finished")
logs = SQLiteStorage.get_logs("emojikit", "killed")
print(json.dumps({"stored": stored, "rows": sorted([row["step"], key, row[key]] for row in logs for key in row if key not in ("step", "timestamp"))}))
"""


def test_trackio_resume_sends_a_row_lost_beside_a_kept_row_of_its_step(tmp_path):
    pytest.importorskip("trackio", reason=f"the trackio tracker's library; {EXTRA}")
    done = subprocess.run([sys.executable, "-c", TRACKIO_LOST_ROW], env=tracker_env(tmp_path), cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(next(line for line in done.stdout.splitlines() if line.startswith("{")))
    assert result["stored"] is not None and result["stored"] < 2  # step 2 is not whole in the store
    assert result["rows"] == [[1, "heldout/success_rate", 0.5], [1, "loss", 1.0], [2, "heldout/success_rate", 0.25], [2, "loss", 2.0], [3, "loss", 3.0]]


# --- a third-party tracker: the contract, failures, resume ------------------------------------------


class Recorder:
    """A tracker that keeps what it receives in a JSON file (a third party's plugin in miniature)."""

    def __init__(self, path: Path, fail_at: int | None = None):
        self.path, self.fail_at = path, fail_at

    def _add(self, event: dict) -> None:
        events = json.loads(self.path.read_text()) if self.path.exists() else []
        self.path.write_text(json.dumps(events + [event]))

    def start(self, run):
        self._add({"start": run.resume_id, "resume_step": run.resume_step, "kind": run.kind, "config": run.config, "code": run.code})
        return run.resume_id or "recorded-1"

    def log_metrics(self, metrics, step):
        if self.fail_at is not None and step >= self.fail_at:
            raise OSError(28, "No space left on device")
        self._add({"step": step, "metrics": metrics})

    def log_table(self, name, columns, rows):
        self._add({"table": name, "columns": columns, "rows": rows})

    def finish(self, status):
        self._add({"finish": status})


def recorder_plugin(record_dir: Path):
    import types

    from emojikit import Component, ConfigModel, hookimpl

    class RecorderConfig(ConfigModel):
        fail_at: int | None = None

    module = types.ModuleType("recorder_plugin")

    @hookimpl
    def register_trackers():
        return [Component(name=name, summary="records", config=RecorderConfig, factory=lambda c, ctx, name=name: Recorder(record_dir / f"{name}.json", c.fail_at))
                for name in ("recorder", "flaky")]

    module.register_trackers = register_trackers
    return module


@pytest.fixture
def recorder_registry(tmp_path, monkeypatch):
    from emojikit.composition import registry as registry_mod
    from emojikit.composition.registry import Registry

    reg = Registry()
    reg.register(recorder_plugin(tmp_path), "recorder", "emojikit-recorder", "0.3.0")
    monkeypatch.setattr(registry_mod, "_default", reg)
    return reg


def write_chats(path: Path, n: int) -> None:
    rows = [{"messages": [{"role": "system", "content": "Reply with emoji."}, {"role": "user", "content": f"news number {i} about pizza"},
                          {"role": "assistant", "content": "🍕🎉"}]} for i in range(n)]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def test_a_failing_tracker_warns_once_and_the_run_goes_on_then_resume_continues(tmp_path, tiny_model, recorder_registry, monkeypatch):
    monkeypatch.chdir(tmp_path)
    write_chats(tmp_path / "train.jsonl", 24)
    write_chats(tmp_path / "test.jsonl", 4)
    (tmp_path / "sft.toml").write_text(f"""kind = "sft"
out = "run"
[backend]
use = "local"
model = {json.dumps(str(tiny_model))}
[sft]
train_file = "train.jsonl"
test_file = "test.jsonl"
batch_size = 4
steps = 4
save_every = 2
eval_every = 2
sample_every = 2
report_examples = 0
max_new_tokens = 6
[tracking]
use = ["recorder", "flaky"]
[tracking.flaky]
fail_at = 2
""", encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", "sft.toml"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert result.output.count("tracker 'flaky' failed") == 1 and "No space left on device" in result.output, result.output
    rows = read_rows(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    events = json.loads((tmp_path / "recorder.json").read_text())
    start = events[0]
    assert start["start"] is None and start["kind"] == "sft" and start["config"]["sft"]["steps"] == 4
    assert start["config"]["tracking"]["use"] == ["recorder", "flaky"]
    assert {"plugin": "recorder", "distribution": "emojikit-recorder", "version": "0.3.0"} in start["code"]["plugins"]
    logged = [e for e in events if "step" in e]
    assert [e["step"] for e in logged] == [1, 2, 3, 4]
    for event, row in zip(logged, rows):
        assert event["metrics"] == {k: float(v) for k, v in row.items() if k != "step" and isinstance(v, (int, float))}
    tables = {e["table"]: e for e in events if "table" in e}
    assert set(tables) == {"samples"} and tables["samples"]["rows"][0][0] == 4
    assert events[-1] == {"finish": "finished"}
    flaky = json.loads((tmp_path / "flaky.json").read_text())
    assert [e["step"] for e in flaky if "step" in e] == [1] and flaky[-1] == {"finish": "failed"}  # dropped, then released

    # --resume with more steps continues the same tracker run from the step after the last sent.
    result = CliRunner().invoke(cli, ["run", "sft.toml", "--set", "sft.steps=6", "--resume"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    events = json.loads((tmp_path / "recorder.json").read_text())
    resumed = [e for e in events if "start" in e][-1]
    assert resumed["start"] == "recorded-1" and resumed["resume_step"] == 4
    assert [e["step"] for e in events if "step" in e] == [1, 2, 3, 4, 5, 6]
    assert [r["step"] for r in read_rows(tmp_path / "run" / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]


# --- configuration errors: one line, exit status 2 -------------------------------------------------


@pytest.mark.parametrize("tracking, problem", [
    ('use = 3', "[tracking] use: expected a tracker name or a list of them"),
    ('use = ["recorder"]\n[tracking.flaky]\nfail_at = 1', "[tracking] flaky: settings of a tracker that use does not name"),
    ('use = ["recordr"]', "[tracking.recordr] use: no tracker named 'recordr' (did you mean 'recorder'?)"),
    ('use = "recorder"\n[tracking.recorder]\nfail_a = 1', "[tracking.recorder] fail_a: unknown key (did you mean 'fail_at'?)"),
])
def test_bad_tracking_table_is_one_line(tmp_path, recorder_registry, monkeypatch, tracking, problem):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.toml").write_text(f'kind = "data"\n[prompts]\nuse = "generated"\n[teacher]\nuse = "lexicon"\n[tracking]\n{tracking}\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", "data.toml"])
    assert result.exit_code == 2 and problem in result.output and "Traceback" not in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_missing_tracker_library_is_one_line_naming_the_extra(tmp_path, monkeypatch):
    import importlib.util as util

    from emojikit_trackers import common

    real = util.find_spec
    monkeypatch.setattr(common.importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data.toml").write_text('kind = "data"\n[prompts]\nuse = "generated"\n[teacher]\nuse = "lexicon"\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["run", "data.toml", "--tracker", "wandb", "--dry-run"])
    assert result.exit_code == 2, result.output
    assert "[tracking.wandb] the wandb tracker needs the wandb library: pip install 'emojikit[wandb]'" in result.output
    assert not (tmp_path / "runs").exists()


def test_wandb_online_without_a_key_is_one_line_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.chdir(tmp_path)  # no .env here
    (tmp_path / "data.toml").write_text('kind = "data"\n[prompts]\nuse = "generated"\n[teacher]\nuse = "lexicon"\n[tracking]\nuse = ["wandb"]\n[tracking.wandb]\nmode = "online"\n', encoding="utf-8")
    result = CliRunner().invoke(cli, ["validate", "data.toml"])
    assert result.exit_code == 2 and "WANDB_API_KEY" in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_the_wandb_key_never_lands_in_a_run_directory(tmp_path):
    pytest.importorskip("wandb", reason=f"the wandb tracker's library; {EXTRA}")
    key = "wandb-test-key-0123456789abcdef0123456789abcdef"
    (tmp_path / "data.toml").write_text(
        'kind = "data"\nout = "run"\n[prompts]\nuse = "generated"\n[teacher]\nuse = "lexicon"\n[data]\ncount = 40\nrl_count = 10\n'
        '[tracking]\nuse = ["wandb"]\n[tracking.wandb]\nmode = "offline"\n', encoding="utf-8")
    done = emojikit_run(tmp_path, "data.toml", env=tracker_env(tmp_path, WANDB_API_KEY=key))
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert key not in done.stdout + done.stderr
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert any(p.suffix == ".wandb" for p in files)  # offline: the run is there, to sync later
    for path in files:
        assert key.encode() not in path.read_bytes(), path
    records = wandb_records(tmp_path / "run")
    tables = [r for r in records if r.get("type") == "history" and any(k.startswith("tables/data_stats") for k in r["history"]["item"])]
    assert tables, "the data run's statistics arrive as a table"
