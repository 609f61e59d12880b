"""Hugging Face encoder/decoder models: built from a preset config, or loaded from a local path.

- ``encoder``: ``BertForMaskedLM`` (masked LM, 15% masking in training).
- ``decoder``: ``GPT2LMHeadModel`` (next-token loss).
- Loading (:func:`load_model`) accepts any local Hugging Face model directory whose
  ``config.json`` names a masked-LM or causal-LM architecture (BERT, GPT-2, Llama-style such as
  SmolLM2, ...), and a GGUF file (needs ``gguf`` and ``accelerate``). A directory holding a bare
  encoder with no LM head (e.g. all-MiniLM-L6) loads as ``head=False``: activation-only metrics.

Weights load through safetensors (or ``torch.load(weights_only=True)`` inside transformers for
``.bin`` files); nothing unpickles arbitrary objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import CheckpointError, ConfigError, UnknownNameError

__all__ = [
    "ARCHS",
    "LoadedModel",
    "build_model",
    "load_model",
    "load_like",
    "arch_of_config",
    "resolve_device",
]

ARCHS = ("encoder", "decoder")

_ENCODER_TYPES = {"bert", "roberta", "distilbert", "modernbert", "eurobert", "camembert", "electra"}


@dataclass
class LoadedModel:
    """A model ready for capture.

    Attributes:
        model: the ``torch.nn.Module`` (eval mode, on ``device``).
        arch: ``"encoder"`` (masked LM) or ``"decoder"`` (causal LM).
        family: the HF ``model_type`` (``bert``, ``gpt2``, ``llama``, ...).
        head: whether the model has an LM head (False: activations only, no gradients).
        tie_embeddings: whether input and output embeddings are tied.
        path: where it was loaded from.
    """

    model: Any
    arch: str
    family: str
    head: bool
    tie_embeddings: bool
    path: str


def resolve_device(device: str) -> str:
    """``auto`` → CUDA, else MPS, else CPU; ``cuda``, ``cuda:N``, ``mps`` checked against the
    machine (a ConfigError when absent). Under a distributed launch each rank takes
    ``cuda:LOCAL_RANK``. See :func:`tangentlab.distributed.resolve_device`."""
    from tangentlab.distributed import resolve_device as _resolve

    return _resolve(device)


def build_model(
    arch: str,
    *,
    vocab_size: int,
    d_model: int,
    n_layers: int,
    n_heads: int,
    seq_len: int,
    d_ff: int | None = None,
    tie_embeddings: bool = True,
    dropout: float = 0.0,
    pad_token_id: int = 0,
    seed: int = 0,
):
    """A freshly initialised HF model for ``arch`` (deterministic in ``seed``)."""
    import torch
    from transformers import BertConfig, BertForMaskedLM, GPT2Config, GPT2LMHeadModel

    if arch not in ARCHS:
        raise UnknownNameError(f"unknown arch {arch!r}; choose one of {', '.join(ARCHS)}")
    if d_model % n_heads:
        raise ConfigError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
    d_ff = d_ff or 4 * d_model
    torch.manual_seed(seed)
    if arch == "encoder":
        cfg = BertConfig(
            vocab_size=vocab_size, hidden_size=d_model, num_hidden_layers=n_layers,
            num_attention_heads=n_heads, intermediate_size=d_ff,
            max_position_embeddings=seq_len, hidden_dropout_prob=dropout,
            attention_probs_dropout_prob=dropout, pad_token_id=pad_token_id,
            type_vocab_size=1, tie_word_embeddings=tie_embeddings,
        )
        model = BertForMaskedLM(cfg)
    else:
        cfg = GPT2Config(
            vocab_size=vocab_size, n_embd=d_model, n_layer=n_layers, n_head=n_heads,
            n_inner=d_ff, n_positions=seq_len, resid_pdrop=dropout, embd_pdrop=dropout,
            attn_pdrop=dropout, pad_token_id=pad_token_id, bos_token_id=None,
            eos_token_id=None, tie_word_embeddings=tie_embeddings,
        )
        model = GPT2LMHeadModel(cfg)
    return model


def arch_of_config(config) -> tuple[str, bool]:
    """(arch, has_head) of an HF config: encoder/decoder from ``model_type`` and ``architectures``."""
    archs = list(getattr(config, "architectures", None) or [])
    mtype = str(getattr(config, "model_type", ""))
    arch = "encoder" if mtype in _ENCODER_TYPES and not getattr(config, "is_decoder", False) else "decoder"
    if archs:
        head = any(a.endswith(("ForMaskedLM", "ForCausalLM", "LMHeadModel", "ForPreTraining"))
                   for a in archs)
    else:
        head = True
    return arch, head


def _tied(model) -> bool:
    try:
        inp = model.get_input_embeddings()
        out = model.get_output_embeddings()
    except (AttributeError, NotImplementedError):
        return False
    if inp is None or out is None:
        return False
    return inp.weight.data_ptr() == out.weight.data_ptr()


def load_model(path: str | Path, *, device: str = "cpu", gguf_file: str | None = None,
               dtype=None) -> LoadedModel:
    """Load a local HF model directory (or a GGUF file inside ``path``) for capture.

    Raises:
        CheckpointError: the directory is missing, has no ``config.json``, or its weights are
            missing or corrupt.
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    from tangentlab._runtime import quiet_transformers

    quiet_transformers()
    p = Path(path)
    if gguf_file is None and p.is_file() and p.suffix == ".gguf":
        p, gguf_file = p.parent, p.name
    if not p.is_dir():
        raise CheckpointError(f"checkpoint {str(p)!r} does not exist or is not a directory")
    kwargs: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    elif not (p / "config.json").is_file():
        raise CheckpointError(f"checkpoint {str(p)!r} has no config.json; is it a Hugging Face model dir?")
    try:
        config = AutoConfig.from_pretrained(str(p), **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"cannot read the config of {str(p)!r}: {_first_line(exc)}") from None
    arch, head = arch_of_config(config)
    cls = (AutoModelForMaskedLM if arch == "encoder" else AutoModelForCausalLM) if head else AutoModel
    if dtype is not None:
        kwargs["dtype"] = dtype
    try:
        model = cls.from_pretrained(str(p), **kwargs)
    except Exception as exc:  # corrupt safetensors raise several types; all mean "bad checkpoint"
        raise CheckpointError(
            f"cannot load the weights of {str(p)!r} ({type(exc).__name__}: {_first_line(exc)}); "
            "the checkpoint is missing or corrupt"
        ) from None
    model.to(device)
    model.eval()
    for prm in model.parameters():
        if not torch.isfinite(prm).all():
            raise CheckpointError(f"checkpoint {str(p)!r} holds non-finite weights")
    return LoadedModel(model=model, arch=arch, family=str(config.model_type), head=head,
                       tie_embeddings=_tied(model), path=str(p))


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0][:300] if s else type(exc).__name__


def load_like(template: LoadedModel, path: str | Path, *, device: str = "cpu") -> LoadedModel:
    """Load checkpoint ``path`` of the same architecture as ``template`` quickly.

    When ``path`` holds one ``model.safetensors`` and a ``config.json`` equal to the template's
    (up to bookkeeping keys), the template module is deep-copied and the tensors are loaded
    strictly (tied weights re-tied); otherwise this falls back to :func:`load_model`.
    """
    import copy
    import json

    import torch
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    p = Path(path)
    wfile = p / "model.safetensors"
    cfile = p / "config.json"
    if not (wfile.is_file() and cfile.is_file()):
        return load_model(p, device=device)
    try:
        cfg = json.loads(cfile.read_text())
    except json.JSONDecodeError:
        raise CheckpointError(f"{str(cfile)!r} is corrupt JSON") from None
    ignore = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype"}
    mine = {k: v for k, v in template.model.config.to_dict().items() if k not in ignore}
    theirs = {k: v for k, v in cfg.items() if k not in ignore}
    if any(mine.get(k) != v for k, v in theirs.items()):
        return load_model(p, device=device)
    try:
        sd = load_file(str(wfile), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as exc:
        raise CheckpointError(
            f"cannot load the weights of {str(p)!r} ({type(exc).__name__}: {_first_line(exc)}); "
            "the checkpoint is missing or corrupt"
        ) from None
    model = copy.deepcopy(template.model)
    missing, unexpected = model.load_state_dict(sd, strict=False)
    tied_ok = template.tie_embeddings and all(
        k.endswith(("lm_head.weight", "decoder.weight", "decoder.bias")) for k in missing)
    if unexpected or (missing and not tied_ok):
        raise CheckpointError(
            f"checkpoint {str(p)!r} does not match the trajectory's model (missing {missing[:3]}, "
            f"unexpected {unexpected[:3]})"
        )
    if template.tie_embeddings:
        model.tie_weights()
    for prm in model.parameters():
        if not torch.isfinite(prm).all():
            raise CheckpointError(f"checkpoint {str(p)!r} holds non-finite weights")
    model.eval()
    return LoadedModel(model=model, arch=template.arch, family=template.family,
                       head=template.head, tie_embeddings=template.tie_embeddings, path=str(p))
