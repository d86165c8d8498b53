import os
from pathlib import Path

# The suite runs offline: nothing may load weights or data from a hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from emojikit.support.torch_env import prepare_torch_environment  # noqa: E402

prepare_torch_environment()  # the torch settings the `emojikit` command runs with

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> Path:
    """A 2-layer Llama with SmolLM2's tokenizer and chat template, saved like any local model."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from emojikit.support.bundled import SMOLLM2, load_tokenizer

    torch.manual_seed(0)
    tokenizer = load_tokenizer(SMOLLM2)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, tie_word_embeddings=True)
    path = tmp_path_factory.mktemp("tiny-model")
    LlamaForCausalLM(config).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path
