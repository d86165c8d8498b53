"""Recipe and data texts several test files write into a temporary directory."""

import json

# The component tables of an offline GRPO recipe on the local backend, without a mask.
GRPO_COMPONENTS = """[backend]
use = "local"
[decoder]
use = "none"
[judge]
use = "retrieval"
[reward]
use = "similarity"
[prompts]
use = "generated"
"""

# An SFT recipe reading train.jsonl and test.jsonl next to it, run into ./run.
SFT = """kind = "sft"
out = "run"
[backend]
use = "local"
[sft]
train_file = "train.jsonl"
test_file = "test.jsonl"
"""


def jsonl(rows) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
