"""Helpers the loop tests share: run the CLI in-process, read a run's JSONL rows."""

import json
from pathlib import Path

from click.testing import CliRunner

from emojikit.ui.cli import cli


def run_cli(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def read_rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
