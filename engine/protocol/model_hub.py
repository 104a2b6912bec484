"""A Hugging Face hub id as the model (`--model Qwen/Qwen3-4B`, `model.path`, `eval Qwen/Qwen3-4B`): fetched once
into the Hugging Face cache, then used as the local snapshot folder it is there, offline.

    is_hub_id("Qwen/Qwen3-4B")           # True unless a path of that name exists here
    folder = fetch_hub_model("Qwen/Qwen3-4B")   # .../hub/models--Qwen--Qwen3-4B/snapshots/<commit>

The engine resolves the id once (`up`, engine/tools/models.py; `eval`, actors/evaluation/cli.py) and hands the
folder on: run.json's model_path and config.toml's model.path name it, so the workers and the learner (started
with HF_HUB_OFFLINE=1) and `--resume` never go to the network. A cached snapshot that holds the config and every
weight file is used as it is, without a network call; otherwise the download runs in a child process
(`python -m engine.protocol.model_hub REPO_ID`) with the hub allowed, since bin/spade-engine runs every command
offline: its progress bars go to the terminal, and it fetches the config, tokenizer and safetensors weights at the
top of the repository only. The user's own HF_HUB_OFFLINE (bin/spade-engine keeps it as SPADE_USER_HF_HUB_OFFLINE
before it sets its own) forbids the download.

No torch here; huggingface_hub (installed with transformers) is imported lazily. Part of the protocol layer so that
both the engine and `eval` (actors) resolve an id the same way.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from engine.protocol.errors import InputError, RunFailed

REPO = Path(__file__).resolve().parents[2]
# owner/name as the hub spells them: letters, digits, "_", "-", "." (not at either end, no "--" or "..")
HUB_ID = re.compile(r"(?!.*(--|\.\.))[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9])?/[A-Za-z0-9](?:[\w.-]{0,94}[A-Za-z0-9])?")
MODEL_FILES = ["*.json", "*.safetensors", "*.txt", "*.model", "*.tiktoken", "*.jinja"]  # config, tokenizer, weights
SUBFOLDERS = ["*/*"]  # other formats and variants (original/, onnx/, gguf/ ...): a transformers folder is flat
USER_OFFLINE = "SPADE_USER_HF_HUB_OFFLINE"  # the user's HF_HUB_OFFLINE, kept by bin/spade-engine before it sets its own
ERROR_PREFIX = "hub-error "  # how the child reports a failure on stdout: the prefix, the exit code, the line


class HubModelError(InputError, ValueError):
    """A hub id that cannot be had: not on the hub, gated, or not cached where the hub cannot be reached."""


class HubFetchFailed(RunFailed):
    """The download started and failed (a dropped connection, a full disk): running the command again resumes it."""


def is_hub_id(text: str | Path) -> bool:
    """Whether `text` names a hub repository: the owner/name shape, and no file or folder of that name here (a path
    that exists is always a path)."""
    text = str(text)
    return HUB_ID.fullmatch(text) is not None and not Path(text).expanduser().exists()


def hub_offline() -> bool:
    """Whether the user forbade the hub (HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE true, as bin/spade-engine found them)."""
    if USER_OFFLINE in os.environ:
        value = os.environ[USER_OFFLINE]
    else:
        value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.strip().upper() in ("1", "ON", "YES", "TRUE")


def hub_cache() -> str:
    """The Hugging Face cache folder this process uses (HF_HUB_CACHE, else HF_HOME/hub, else ~/.cache/huggingface/hub)."""
    from huggingface_hub import constants

    return str(constants.HF_HUB_CACHE)


def cached_snapshot(repo_id: str) -> Path | None:
    """The cached snapshot folder of `repo_id`'s main revision when it holds the config and every weight file, found
    without the network (huggingface_hub's cache lookup); else None."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json")
    if not isinstance(found, str):  # None (not cached) or the "known not to exist" marker
        return None
    folder = Path(found).parent
    return folder if weights_complete(folder) else None


def weights_complete(folder: Path) -> bool:
    """Whether `folder` holds its weights: every shard its index names, or a single weights file."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).is_file():
            try:
                shards = set(json.loads((folder / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return False
            return all((folder / shard).is_file() for shard in shards)
    return any(folder.glob("*.safetensors")) or any(folder.glob("pytorch_model*.bin"))


def unreachable(repo_id: str, why: str) -> str:
    return (
        f"model {repo_id} is neither a local folder nor in the Hugging Face cache ({hub_cache()}), and the hub cannot "
        f"be reached ({why}): download it where there is a network (hf download {repo_id}) and bring that cache "
        "here (HF_HOME), or give a local model folder"
    )


def fetch_hub_model(repo_id: str, say=print) -> Path:
    """The local snapshot folder of `repo_id`: the cached one when complete, else downloaded into the cache once (in
    a child process, progress on the terminal). HubModelError / HubFetchFailed with one line when it cannot be had."""
    folder = cached_snapshot(repo_id)
    if folder is not None:
        return folder
    if hub_offline():
        raise HubModelError(unreachable(repo_id, "HF_HUB_OFFLINE is set"))
    say(f"fetching {repo_id} from the Hugging Face hub into {hub_cache()} (once: later runs use the cached copy)...")
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", USER_OFFLINE)}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    result = subprocess.run(
        [sys.executable, "-m", "engine.protocol.model_hub", repo_id], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True,
    )
    lines = result.stdout.strip().splitlines() or [""]
    last = lines[-1]
    if result.returncode == 0 and Path(last).is_dir():
        return Path(last)
    if last.startswith(ERROR_PREFIX):
        code, _, message = last[len(ERROR_PREFIX):].partition(" ")
        raise (HubModelError if code == str(HubModelError.exit_code) else HubFetchFailed)(message)
    raise HubFetchFailed(f"fetching model {repo_id} from the Hugging Face hub failed (exit code {result.returncode}; its output is above): run the command again, or give a local model folder")


def download(repo_id: str) -> Path:
    """Download `repo_id`'s config, tokenizer and safetensors weights into the cache (this process goes online);
    the snapshot folder, or HubModelError / HubFetchFailed with one line."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import GatedRepoError, HfHubHTTPError, LocalEntryNotFoundError, RepositoryNotFoundError

    try:
        return Path(snapshot_download(repo_id, allow_patterns=MODEL_FILES, ignore_patterns=SUBFOLDERS))
    except GatedRepoError:
        raise HubModelError(f"model {repo_id} is gated on the Hugging Face hub: accept its terms at https://huggingface.co/{repo_id}, then log in (hf auth login, or set HF_TOKEN)") from None
    except RepositoryNotFoundError:
        raise HubModelError(f"model {repo_id} is neither a local folder nor a model on the Hugging Face hub (or a private one: log in with hf auth login, or set HF_TOKEN): check the name, or give a local model folder") from None
    except LocalEntryNotFoundError as exc:  # no connection and nothing usable cached
        cause = exc.__cause__ or exc
        raise HubModelError(unreachable(repo_id, _one_line(cause))) from None
    except HfHubHTTPError as exc:
        raise HubFetchFailed(f"fetching model {repo_id}: the Hugging Face hub answered with an error ({_one_line(exc)}): try again later, or give a local model folder") from None
    except OSError as exc:
        raise HubFetchFailed(f"fetching model {repo_id} into {hub_cache()} failed ({_one_line(exc)}): free space there or point HF_HOME elsewhere, then run the command again") from None
    except Exception as exc:  # a connection dropped mid-file and the like: running it again resumes the download
        raise HubFetchFailed(f"fetching model {repo_id} from the Hugging Face hub failed ({_one_line(exc)}): run the command again (the download resumes), or give a local model folder") from None


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    text = text if len(text) <= 200 else text[:197] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def main(argv: list[str] | None = None) -> int:
    """The child `fetch_hub_model` starts: downloads, then prints the folder (or ERROR_PREFIX, the code and the
    line) as its last line on stdout; the progress bars go to stderr."""
    (repo_id,) = sys.argv[1:] if argv is None else argv
    try:
        folder = download(repo_id)
    except (HubModelError, HubFetchFailed) as exc:
        print(f"{ERROR_PREFIX}{exc.exit_code} {exc}", flush=True)
        return exc.exit_code
    except KeyboardInterrupt:  # Ctrl-C reaches the parent too, which says so
        return 130
    print(folder, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
