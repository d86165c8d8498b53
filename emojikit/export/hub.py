"""`emojikit export --push`: upload an export folder to the Hugging Face Hub with huggingface_hub.

The token is read from HF_TOKEN in the environment and handed to HfApi in memory only: it is
never written to disk (not to the folder, not to huggingface_hub's token file). Repositories
are created private unless asked otherwise. Every failure a user can fix is one line.
"""

from __future__ import annotations

import os
from pathlib import Path

from emojikit.api.errors import ConfigError, MissingCredentialError, RemoteServiceError

TOKEN_VAR = "HF_TOKEN"


def check(repo_id: str) -> str:
    """Before anything loads: the repository id is well formed and a token is set. Returns the token."""
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        raise ConfigError(f"--push {repo_id}: not a Hub repository id (expected NAMESPACE/NAME, e.g. you/emoji-sender)") from None
    if "/" not in repo_id:
        raise ConfigError(f"--push {repo_id}: name the namespace too (NAMESPACE/NAME, e.g. you/{repo_id})")
    token = os.environ.get(TOKEN_VAR)
    if not token:
        raise MissingCredentialError(f"--push needs a Hugging Face token with write access: set {TOKEN_VAR} in the environment")
    return token


def push(folder: Path, repo_id: str, *, private: bool = True) -> str:
    """Create `repo_id` (private by default; an existing one is reused) and upload the folder
    as one commit. Returns the repository's URL."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, OfflineModeIsEnabled, RepositoryNotFoundError

    token = check(repo_id)
    api = HfApi(token=token)
    where = f"--push {repo_id}"
    try:
        url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=str(folder), repo_id=repo_id, repo_type="model", commit_message="emojikit export")
    except OfflineModeIsEnabled:
        raise RemoteServiceError(f"{where}: HF_HUB_OFFLINE is set, so nothing can be uploaded; the export at {folder} is complete (unset it and push again)") from None
    except RepositoryNotFoundError:
        raise RemoteServiceError(f"{where}: no such repository, or the token cannot write to it; the export at {folder} is complete") from None
    except HfHubHTTPError as exc:
        status = getattr(getattr(exc, "response", None), "status_code", None)
        problem = {401: "the token in HF_TOKEN was refused", 403: "the token cannot write to this namespace"}.get(status, f"the Hub answered HTTP {status}")
        raise RemoteServiceError(f"{where}: {problem}; the export at {folder} is complete") from None
    except (OSError, ConnectionError) as exc:
        raise RemoteServiceError(f"{where}: cannot reach the Hugging Face Hub ({type(exc).__name__}); the export at {folder} is complete, push it when online") from None
    except Exception as exc:  # httpx's transport errors are not OSErrors
        if type(exc).__module__.split(".")[0] in ("httpx", "httpcore", "requests", "urllib3"):
            raise RemoteServiceError(f"{where}: cannot reach the Hugging Face Hub ({type(exc).__name__}); the export at {folder} is complete, push it when online") from None
        raise
    return str(url)
