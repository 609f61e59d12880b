"""Hugging Face encoder/decoder models: built from a preset config, or loaded from a local path.

- ``encoder``: ``BertForMaskedLM`` (masked LM, 15% masking in training).
- ``decoder``: ``GPT2LMHeadModel`` (next-token loss).
- Loading (:func:`load_model`) accepts any local Hugging Face model directory whose
  ``config.json`` names a masked-LM or causal-LM architecture (BERT, GPT-2, Llama-style such as
  SmolLM2, ...), and a GGUF file (needs ``gguf`` and ``accelerate``). A directory holding a bare
  encoder with no LM head (e.g. all-MiniLM-L6) loads as ``head=False``: activation-only metrics.

Precision (:func:`resolve_dtype`): the forward pass runs in ``float32`` (default, whatever the
checkpoint's stored dtype), ``bfloat16`` or ``float16``. A dtype the device cannot run is a
:class:`~tangentlab.errors.DTypeError` before any model is loaded. :class:`LoadedModel` records the
dtype that ran and the dtype the checkpoint stored. Whatever ran, statistics must be accumulated in
at least float32: :func:`stat_dtype` / :func:`to_stat` give the dtype and the cast to use.

Weights load through safetensors (or ``torch.load(weights_only=True)`` inside transformers for
``.bin`` files); nothing unpickles arbitrary objects.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tangentlab.errors import CheckpointError, ConfigError, DTypeError, UnknownNameError

__all__ = [
    "ARCHS",
    "DTYPES",
    "resolve_dtype",
    "check_dtype_runs",
    "stat_dtype",
    "to_stat",
    "LoadedModel",
    "build_model",
    "load_model",
    "load_like",
    "arch_of_config",
    "resolve_device",
]

ARCHS = ("encoder", "decoder")

#: forward-pass dtypes accepted by name (``--dtype``); the default is the first
DTYPES = ("float32", "bfloat16", "float16")

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
        dtype: the dtype the forward pass runs in (``float32``, ``bfloat16``, ``float16``).
        stored_dtype: the dtype the checkpoint's config declares (``""`` when it declares none).
    """

    model: Any
    arch: str
    family: str
    head: bool
    tie_embeddings: bool
    path: str
    dtype: str = "float32"
    stored_dtype: str = ""


def resolve_device(device: str) -> str:
    """The device string for ``device`` (see tangentlab.distributed).

    ``auto`` → CUDA, else MPS, else CPU; ``cuda``, ``cuda:N``, ``mps`` checked against the
    machine (a ConfigError when absent). Under a distributed launch each rank takes
    ``cuda:LOCAL_RANK``. See :func:`tangentlab.distributed.resolve_device`.
    """
    from tangentlab.distributed import resolve_device as _resolve

    return _resolve(device)


def _dtype_name(dt) -> str:
    return str(dt).replace("torch.", "")


def check_dtype_runs(device: str, dtype) -> None:
    """Run the operations a Transformer's forward and backward need, in ``dtype`` on ``device``.

    Raises:
        DTypeError: the device cannot run them (for example bfloat16 on a pre-Ampere GPU); the
            message names the operation that failed and suggests float32.
    """
    import torch
    import torch.nn.functional as F

    name = _dtype_name(dtype)
    if str(device).startswith("cuda") and dtype == torch.bfloat16 and torch.cuda.is_available() \
            and not torch.cuda.is_bf16_supported():
        raise DTypeError(f"device {device!r} cannot run dtype bfloat16 (this GPU has no bf16 "
                         "support); use --dtype float32 or float16")
    op = "tensor creation"
    try:
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(4, 8, generator=g).to(device=device, dtype=dtype).requires_grad_(True)
        w = torch.randn(8, 8, generator=g).to(device=device, dtype=dtype)
        op = "matmul"
        y = x @ w
        op = "layer_norm"
        y = F.layer_norm(y, (8,))
        op = "gelu"
        y = F.gelu(y)
        op = "softmax"
        y = torch.softmax(y, dim=-1)
        op = "scaled_dot_product_attention"
        q = y.reshape(1, 1, 4, 8)
        y = F.scaled_dot_product_attention(q, q, q, is_causal=True).reshape(4, 8)
        op = "backward"
        y.float().sum().backward()
        if x.grad is None or not torch.isfinite(x.grad.float()).all():
            raise RuntimeError("non-finite or missing gradient")
    except (RuntimeError, TypeError, NotImplementedError) as exc:
        msg = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise DTypeError(
            f"device {device!r} cannot run dtype {name} ({op} failed: {msg}); use --dtype float32"
        ) from None


def resolve_dtype(dtype=None, device: str = "cpu"):
    """The ``torch.dtype`` for the forward pass.

    None → float32; a name from :data:`DTYPES` or a torch dtype; checked on ``device`` with
    :func:`check_dtype_runs`.

    Raises:
        ConfigError: a name that is not one of :data:`DTYPES`.
        DTypeError: the device cannot run it.
    """
    import torch

    if dtype is None:
        dt = torch.float32
    elif isinstance(dtype, torch.dtype):
        dt = dtype
    else:
        name = str(dtype).replace("torch.", "").strip().lower()
        name = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16", "half": "float16",
                "float": "float32"}.get(name, name)
        if name not in DTYPES:
            raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}; got {dtype!r}")
        dt = getattr(torch, name)
    if _dtype_name(dt) not in DTYPES:
        raise ConfigError(f"dtype must be one of {', '.join(DTYPES)}; got {_dtype_name(dt)!r}")
    if dt != torch.float32:
        check_dtype_runs(device, dt)
    return dt


def stat_dtype(dtype):
    """The dtype statistics (gradients at sites, moments) must be computed in.

    Float32 for float16/bfloat16/float32 forward passes, the dtype itself when wider (float64).
    """
    import torch

    return dtype if dtype == torch.float64 else torch.float32


def to_stat(t):
    """``t`` cast to :func:`stat_dtype` (a no-op for float32/float64 tensors)."""
    return t.to(stat_dtype(t.dtype)) if t.is_floating_point() else t


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

    ``dtype``: the forward-pass dtype (None → float32, whatever the checkpoint stores; see
    :func:`resolve_dtype`). A Hub checkpoint resolved by :mod:`tangentlab.empirical.hub` is a
    local snapshot directory, so it loads here too.

    Raises:
        CheckpointError: the directory is missing, has no ``config.json``, or its weights are
            missing or corrupt.
        ConfigError / DTypeError: an unknown dtype, or one the device cannot run.
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    from tangentlab._runtime import quiet_transformers

    quiet_transformers()
    dt = resolve_dtype(dtype, device)
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
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    kwargs["dtype"] = dt
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
    ran = next(model.parameters()).dtype
    if ran != dt:  # e.g. a model class that ignores dtype: cast, so what runs is what was asked
        model.to(dt)
        ran = dt
    return LoadedModel(model=model, arch=arch, family=str(config.model_type), head=head,
                       tie_embeddings=_tied(model), path=str(p), dtype=_dtype_name(ran),
                       stored_dtype=_dtype_name(stored) if stored is not None else "")


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0][:300] if s else type(exc).__name__


def load_like(template: LoadedModel, path: str | Path, *, device: str = "cpu") -> LoadedModel:
    """Load checkpoint ``path`` of the same architecture (and forward dtype) as ``template`` quickly.

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
        return load_model(p, device=device, dtype=template.dtype)
    try:
        cfg = json.loads(cfile.read_text())
    except json.JSONDecodeError:
        raise CheckpointError(f"{str(cfile)!r} is corrupt JSON") from None
    ignore = {"transformers_version", "_name_or_path", "architectures", "dtype", "torch_dtype"}
    mine = {k: v for k, v in template.model.config.to_dict().items() if k not in ignore}
    theirs = {k: v for k, v in cfg.items() if k not in ignore}
    if any(mine.get(k) != v for k, v in theirs.items()):
        return load_model(p, device=device, dtype=template.dtype)
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
    stored = cfg.get("dtype") or cfg.get("torch_dtype") or ""
    return LoadedModel(model=model, arch=template.arch, family=template.family,
                       head=template.head, tie_embeddings=template.tie_embeddings, path=str(p),
                       dtype=template.dtype, stored_dtype=str(stored))
