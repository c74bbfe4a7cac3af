"""What a model's files say without its weights: its config and tokenizer, read safely.

A model folder is data from whoever made it. Its config and tokenizer are read only after
`check_remote_code` has made sure neither would import code from the folder (unless allowed),
and a config's size fields are checked (`rbplab.extraction.config_checks`) before transformers
builds anything from them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rbplab.catalog.models import ModelLoadError, ResolvedModel
from rbplab.core.documents import read_json
from rbplab.core.errors import BadFileError
from rbplab.extraction.config_checks import check_config_fields, config_label
from rbplab.extraction.gguf_header import check_gguf_header
from rbplab.extraction.gguf_vocab import embedded_vocabulary


class RemoteCodeError(ModelLoadError):
    """A model that needs Python code from its own directory or repository, which was not allowed."""


def remote_code_error(name: str, where: str) -> RemoteCodeError:
    return RemoteCodeError(
        f"{name} needs custom Python code from {where}, which rbplab does not run unless you opt in "
        "with --trust-remote-code (trust_remote_code=True; recorded in the cache key)"
    )


# Files whose auto_map makes transformers' config or tokenizer loader import code from the folder.
_REMOTE_CODE_FILES = ("config.json", "tokenizer_config.json")


_MAX_CONFIG_BYTES = 64 << 20  # a tokenizer_config.json with a large added-token table is a few MB
_CONFIG_KINDS = {"config.json": "model config", "tokenizer_config.json": "tokenizer config"}


def check_remote_code(model: ResolvedModel) -> None:
    """Refuse, unless allowed, a local model whose configs ask for custom code (an ``auto_map``)
    anywhere the config or tokenizer loader can reach: the model folder (a GGUF file's folder
    too), the tokenizer folder it uses (a checkpoint's base folder), a tokenizer override folder,
    and for a checkpoint (``<base>/checkpoints/step-<n>``) every folder up to its base. Only the
    JSON is read (bounded, regular files only); no code runs to find out. The files are read even
    when custom code is allowed: one that cannot be read safely is refused either way."""
    for folder in _loader_folders(model):
        for name in _REMOTE_CODE_FILES:
            if _has_auto_map(folder / name, model) and not model.trust_remote_code:
                where = "its directory" if str(folder) == model.location else f"{folder}"
                raise remote_code_error(model.model, f"{where} ({name} has an auto_map)")


def _loader_folders(model: ResolvedModel) -> list[Path]:
    from rbplab.catalog.schedules import CHECKPOINTS_DIR

    folders: list[Path] = []
    if model.local:
        location = Path(model.location)
        folders.append(location)
        if location.parent.name == CHECKPOINTS_DIR:  # a checkpoint: its folder, checkpoints/, its base
            folders += [location.parent, location.parent.parent]
    if model.tokenizer_location:
        folders.append(Path(model.tokenizer_location))
    if model.tokenizer and Path(model.tokenizer).expanduser().is_dir():
        folders.append(Path(model.tokenizer).expanduser())
    return list(dict.fromkeys(folders))


def _has_auto_map(path: Path, model: ResolvedModel) -> bool:
    """Whether the JSON file `path` carries an auto_map (False when it is missing). It is read by
    the bounded reader, so a config that is not a JSON object, is nested too deeply, is huge or is
    not a regular file is a one-line ModelLoadError here, before transformers parses it."""
    try:
        parsed = read_json(path, _CONFIG_KINDS[path.name], _MAX_CONFIG_BYTES, shape=dict)
    except FileNotFoundError:
        return False
    except BadFileError as err:
        raise ModelLoadError(f"cannot check {path.name} of {model.model} for custom code: {err}") from None
    except OSError as err:
        if not path.exists():
            return False
        raise ModelLoadError(
            f"cannot check {path} of {model.model} for custom code: {err.strerror or err}"
        ) from None
    return bool(parsed.get("auto_map"))


def is_remote_code_refusal(err: BaseException) -> bool:
    return "trust_remote_code" in str(err)


def load_config(model: ResolvedModel, revision: str | None = None) -> Any:
    """The model's config (at `revision`: a hub commit; None for a local model, whose checkpoint is
    its own folder). The first read of a model's files: custom code is refused first, for the
    tokenizer's folders too (`check_remote_code`), and the size fields are checked
    (`check_config_fields`) before transformers builds anything from them, so a hostile
    config.json is one line naming the field."""
    from huggingface_hub.errors import StrictDataclassError
    from transformers import AutoConfig, PretrainedConfig

    check_remote_code(model)
    label = config_label(model)
    kwargs: dict[str, Any] = {"revision": revision} if revision else {}
    if model.gguf_file:
        kwargs["gguf_file"] = model.gguf_file
        if model.local:  # transformers' own GGUF reader believes every count the header declares
            check_gguf_header(Path(model.location) / model.gguf_file)
    try:
        if not model.gguf_file:  # a GGUF's config is converted from its metadata, checked below
            raw, _ = PretrainedConfig.get_config_dict(model.location, **kwargs)
            check_config_fields(raw, label)
        config = AutoConfig.from_pretrained(
            model.location, trust_remote_code=model.trust_remote_code, **kwargs
        )
    except ModelLoadError:
        raise
    except (OSError, ValueError, KeyError) as err:
        if not model.trust_remote_code and is_remote_code_refusal(err):
            raise remote_code_error(model.location, "its repository") from err
        where = "the Hugging Face hub" if not model.local else model.location
        raise ModelLoadError(
            f"could not read the model config of {model.location!r} from {where}: {err}"
        ) from err
    except (StrictDataclassError, TypeError, ArithmeticError) as err:  # transformers' own checks
        reason = " ".join(str(err).split())
        raise ModelLoadError(f"{label} is not a valid config: {reason}") from err
    check_config_fields(config.to_dict(), label)
    return config


def load_tokenizer(model: ResolvedModel, revision: str | None = None) -> tuple[Any, int]:
    """The model's tokenizer (at `revision`, default model.revision), or model.tokenizer when
    given, and how many placeholder tokens end its list (a local GGUF's embedded tokenizer:
    `rbplab.extraction.gguf_vocab`; 0 otherwise)."""
    from transformers import AutoTokenizer

    revision = revision or model.revision
    placeholders = 0
    if model.tokenizer:
        location, kwargs = model.tokenizer, {}
    else:
        location = model.tokenizer_location or model.location
        kwargs = {"revision": revision} if revision and not model.local else {}
        if model.gguf_file:
            embedded = embedded_vocabulary(Path(model.location) / model.gguf_file) if model.local else None
            if model.local and embedded is None:
                raise ModelLoadError(
                    f"GGUF file {model.gguf_file} has no embedded tokenizer; pass the tokenizer of the "
                    "original model with tokenizer=<hub id or local tokenizer directory> "
                    "(CLI: --tokenizer)"
                )
            kwargs["gguf_file"] = model.gguf_file
            placeholders = embedded.trailing_placeholders if embedded is not None else 0
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            location, trust_remote_code=model.trust_remote_code, **kwargs
        )
    except (OSError, ValueError, KeyError, TypeError) as err:
        if not model.trust_remote_code and is_remote_code_refusal(err):
            raise remote_code_error(str(location), "its tokenizer's repository") from err
        hint = " (pass tokenizer=... to load it from elsewhere)" if not model.tokenizer else ""
        raise ModelLoadError(f"could not load a tokenizer from {location!r}{hint}: {err}") from err
    return tokenizer, placeholders
