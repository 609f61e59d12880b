"""Hugging Face encoder/decoder models: built from a preset config, or loaded from a path or a Hub id.

- ``encoder``: ``BertForMaskedLM`` (masked LM, 15% masking in training).
- ``decoder``: ``GPT2LMHeadModel`` (next-token loss).
- Loading (:func:`load_model`) accepts any local Hugging Face model directory whose
  ``config.json`` names a masked-LM or causal-LM architecture (BERT, GPT-2, Llama-style such as
  SmolLM2, ...), a GGUF file (needs ``gguf`` and ``accelerate``), and a Hub model id
  (``ORG/NAME``, ``ORG/NAME@REVISION`` or ``revision=``) resolved through the Hub cache by
  :mod:`tangentlab.empirical.loading.hub`. A directory holding a bare encoder with no LM head
  (e.g. all-MiniLM-L6) loads as ``head=False``: activation-only metrics.

Every checkpoint, the first of a trajectory and each later one (:func:`load_like`), loads through
transformers' own ``from_pretrained``: its key renames (GPT-NeoX's ``embed_out`` on disk is
``lm_head`` in the module), tied weights, sharded safetensors and ``.bin`` files. There is no
faster path that bypasses it: deep-copying the first model and loading a state dict into the copy
was measured slower (about 2 s against 0.1 s for a 70M-parameter GPT-NeoX on CPU), and it skipped
the renames. A checkpoint that lacks weights the model needs is a
:class:`~tangentlab.errors.CheckpointError` (transformers would initialise them at random).

Precision (:func:`resolve_dtype`): the forward pass runs in ``float32`` (default, whatever the
checkpoint's stored dtype), ``bfloat16`` or ``float16``. A dtype the device cannot run is a
:class:`~tangentlab.errors.DTypeError` before any model is loaded. :class:`LoadedModel` records the
dtype that ran and the dtype the checkpoint stored. Whatever ran, statistics must be accumulated in
at least float32: :func:`stat_dtype` / :func:`to_stat` give the dtype and the cast to use.

Weights load through safetensors (or ``torch.load(weights_only=True)`` inside transformers for
``.bin`` files); nothing unpickles arbitrary objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tangentlab.errors import CheckpointError, ConfigError, DTypeError, UnknownNameError

if TYPE_CHECKING:  # annotations only
    import torch

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

_ENCODER_TYPES = {"bert", "roberta", "distilbert", "modernbert", "eurobert", "camembert", "electra",
                  "planted_mlm"}


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
        repo_id: the Hub model id it was resolved from (None for a local path).
        revision: the Hub revision (None for a local path).
        commit: the commit hash of the Hub snapshot (None for a local path).
        gguf_file: the GGUF file inside ``path`` it was loaded from (None otherwise).
        tokenizer: the tokenizer saved beside the weights, loaded on first use (property).
    """

    model: torch.nn.Module
    arch: str
    family: str
    head: bool
    tie_embeddings: bool
    path: str
    dtype: str = "float32"
    stored_dtype: str = ""
    repo_id: str | None = None
    revision: str | None = None
    commit: str | None = None
    gguf_file: str | None = None
    _tokenizer: Any = field(default=None, repr=False, compare=False)

    @property
    def tokenizer(self):
        """The tokenizer stored with the checkpoint (``AutoTokenizer``, local files only).

        Loaded on first access and kept. Raises :class:`~tangentlab.errors.CheckpointError`
        when the checkpoint folder holds no tokenizer (then load one with
        :func:`tangentlab.empirical.loading.tokenizer.load_tokenizer` from where it is).
        """
        if self._tokenizer is None:
            if self.gguf_file is None:
                from tangentlab.empirical.loading.tokenizer import load_tokenizer

                self._tokenizer = load_tokenizer(self.path)
            else:
                from transformers import AutoTokenizer

                try:
                    self._tokenizer = AutoTokenizer.from_pretrained(
                        self.path, gguf_file=self.gguf_file, local_files_only=True)
                except (OSError, ValueError, KeyError) as exc:
                    raise CheckpointError(f"cannot load the tokenizer of {self.gguf_file!r} in "
                                          f"{self.path!r}: {_first_line(exc)}") from None
        return self._tokenizer


def resolve_device(device: str) -> str:
    """The device string for ``device`` (see tangentlab.distributed).

    ``auto`` → CUDA, else MPS, else CPU; ``cuda``, ``cuda:N``, ``mps`` checked against the
    machine (a ConfigError when absent). Under a distributed launch each rank takes
    ``cuda:LOCAL_RANK``. See :func:`tangentlab.distributed.resolve_device`.
    """
    from tangentlab import distributed

    return distributed.resolve_device(device)


def _model_folder(path: str | Path, gguf_file: str | None, revision: str | None,
                  cache_dir: str | Path | None, offline: bool | None) -> tuple:
    """``(folder, gguf_file, Hub checkpoint or None)`` of what :func:`load_model` was given.

    Raises:
        ConfigError: ``revision`` with a local path.
        CheckpointError: the folder does not exist or is not a directory.
    """
    from tangentlab.empirical.loading.hub import looks_like_repo_id

    p = Path(path)
    hub_ck = None
    if not p.exists() and gguf_file is None and looks_like_repo_id(str(path)):
        hub_ck = _hub_checkpoint(str(path), revision, cache_dir=cache_dir, offline=offline)
        p = Path(hub_ck.path)
    elif revision is not None:
        raise ConfigError(
            f"revision= selects a revision of a Hub model id, but {str(path)!r} is a local path "
            "(or a GGUF file); pass an id such as EleutherAI/pythia-70m, or drop revision="
        )
    if gguf_file is None and p.is_file() and p.suffix == ".gguf":
        p, gguf_file = p.parent, p.name
    if not p.is_dir():
        raise CheckpointError(f"checkpoint {str(p)!r} does not exist or is not a directory")
    return p, gguf_file, hub_ck


def _pretrained_weights(cls, p: Path, kwargs: dict[str, Any]):
    """``cls.from_pretrained(p, **kwargs)``, every weight present (a GGUF file aside).

    Raises:
        CheckpointError: the weights cannot be read, or some the model needs are missing
            (transformers would initialise them at random).
    """
    try:
        model, info = cls.from_pretrained(str(p), output_loading_info=True, **kwargs)
    except Exception as exc:  # corrupt safetensors raise several types; all mean "bad checkpoint"
        raise CheckpointError(
            f"cannot load the weights of {str(p)!r} ({type(exc).__name__}: {_first_line(exc)}); "
            "the checkpoint is missing or corrupt"
        ) from None
    missing = sorted((info or {}).get("missing_keys") or ())
    if missing and kwargs.get("gguf_file") is None:
        raise CheckpointError(
            f"checkpoint {str(p)!r} lacks {len(missing)} weight(s) its {type(model).__name__} "
            f"needs (first: {', '.join(missing[:3])}); transformers would initialise them at "
            "random, so the checkpoint is incomplete or of another model"
        )
    return model


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


def _hub_checkpoint(spec: str, revision: str | None, *, cache_dir, offline):
    """The one Hub checkpoint ``spec`` (``ORG/NAME`` or ``ORG/NAME@REV``) and ``revision`` name."""
    from tangentlab.empirical.loading.hub import (
        parse_revision_spec,
        resolve_hub_trajectory,
        split_model_spec,
    )

    repo, inline = split_model_spec(spec)
    if inline is not None and revision is not None:
        raise ConfigError(f"{spec!r} already names a revision after '@'; do not also pass revision=")
    rev = inline if inline is not None else revision
    mode, value = parse_revision_spec(rev)
    if mode != "list" or len(value) != 1:  # type: ignore[arg-type]
        raise ConfigError(
            f"load_model loads one checkpoint, but revision {rev!r} of {repo!r} selects several; "
            f"name one (e.g. {repo}@step1000), or use resolve_trajectory({repo!r}, "
            f"revisions={rev!r}) for a trajectory"
        )
    return resolve_hub_trajectory(repo, rev, cache_dir=cache_dir, offline=offline).checkpoints[0]


def _register_family(p: Path) -> None:
    """Register the checkpoint's family with transformers when another module provides it."""
    import json

    from tangentlab.empirical.loading.site_table import register_family

    try:
        mtype = json.loads((p / "config.json").read_text()).get("model_type")
    except (OSError, ValueError, AttributeError):
        return  # AutoConfig reports the unreadable config below
    if isinstance(mtype, str):
        register_family(mtype)


def load_model(path: str | Path, *, device: str = "cpu", gguf_file: str | None = None,
               dtype=None, revision: str | None = None, cache_dir: str | Path | None = None,
               offline: bool | None = None) -> LoadedModel:
    """Load a model for capture: a local HF model directory, a GGUF file, or a Hub model id.

    Args:
        path: a local model directory (or a ``.gguf`` file, or a directory holding ``gguf_file``);
            or a Hub model id ``ORG/NAME`` / ``ORG/NAME@REVISION``, resolved through the Hub
            cache by :mod:`tangentlab.empirical.loading.hub` (downloaded once, read back offline with
            ``HF_HUB_OFFLINE=1``). An existing local path always wins over an id of the same
            spelling.
        device: where the model runs.
        gguf_file: the GGUF file inside ``path`` (local paths only).
        dtype: the forward-pass dtype (None → float32, whatever the checkpoint stores; see
            :func:`resolve_dtype`).
        revision: the Hub revision (branch, tag or commit; default ``main``) of a model id.
        cache_dir: the Hub cache (default: ``$HF_HUB_CACHE``, else ``$HF_HOME/hub``).
        offline: read only the Hub cache (default: ``HF_HUB_OFFLINE``).

    The weights load through ``from_pretrained`` (key renames, tied weights, sharded and ``.bin``
    files). :attr:`LoadedModel.repo_id`, ``revision`` and ``commit`` record a Hub checkpoint.

    Raises:
        CheckpointError: the directory is missing, has no ``config.json``, or its weights are
            missing, incomplete or corrupt.
        UnknownNameError: a model id or revision that is neither a local path nor on the Hub /
            in its cache.
        ConfigError / DTypeError: an unknown dtype, or one the device cannot run; ``revision``
            with a local path; a revision selection of several checkpoints.
    """
    import torch
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM, AutoModelForMaskedLM

    from tangentlab._runtime import quiet_transformers

    quiet_transformers()
    dt = resolve_dtype(dtype, device)
    p, gguf_file, hub_ck = _model_folder(path, gguf_file, revision, cache_dir, offline)
    kwargs: dict[str, Any] = {"local_files_only": True}
    if gguf_file is not None:
        kwargs["gguf_file"] = gguf_file
    elif not (p / "config.json").is_file():
        raise CheckpointError(f"checkpoint {str(p)!r} has no config.json; is it a Hugging Face model dir?")
    else:
        _register_family(p)
    try:
        config = AutoConfig.from_pretrained(str(p), **kwargs)
    except (OSError, ValueError, KeyError) as exc:
        raise CheckpointError(f"cannot read the config of {str(p)!r}: {_first_line(exc)}") from None
    arch, head = arch_of_config(config)
    cls = (AutoModelForMaskedLM if arch == "encoder" else AutoModelForCausalLM) if head else AutoModel
    stored = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None)
    kwargs["dtype"] = dt
    model = _pretrained_weights(cls, p, kwargs)
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
                       stored_dtype=_dtype_name(stored) if stored is not None else "",
                       repo_id=hub_ck.repo_id if hub_ck else None,
                       revision=hub_ck.revision if hub_ck else None,
                       commit=hub_ck.commit if hub_ck else None, gguf_file=gguf_file)


def _first_line(exc: BaseException) -> str:
    s = str(exc).strip()
    return s.splitlines()[0][:300] if s else type(exc).__name__


def _shapes(model) -> dict[str, tuple[int, ...]]:
    return {k: tuple(v.shape) for k, v in model.state_dict().items()}


def load_like(template: LoadedModel, path: str | Path, *, device: str = "cpu",
              gguf_file: str | None = None) -> LoadedModel:
    """Load checkpoint ``path`` of the same model as ``template``, in the template's forward dtype.

    Every checkpoint of a trajectory loads through :func:`load_model` (transformers'
    ``from_pretrained``), so it gets the same state dict as ``from_pretrained``, byte for byte,
    whatever its file layout (safetensors, sharded, ``.bin``) or on-disk key names.

    Raises:
        CheckpointError: the checkpoint cannot be loaded, or its model differs from the
            template's (architecture, family, LM head, or the names and shapes of its tensors).
    """
    lm = load_model(path, device=device, gguf_file=gguf_file, dtype=template.dtype)
    want = (template.arch, template.family, template.head)
    got = (lm.arch, lm.family, lm.head)
    if got != want:
        raise CheckpointError(
            f"checkpoint {str(path)!r} is a {lm.family} {lm.arch} (LM head: {lm.head}) but the "
            f"trajectory's model is a {template.family} {template.arch} (LM head: "
            f"{template.head}); a trajectory cannot mix models"
        )
    mine, theirs = _shapes(template.model), _shapes(lm.model)
    if mine != theirs:
        missing = sorted(set(mine) - set(theirs))
        extra = sorted(set(theirs) - set(mine))
        shape = sorted(k for k in set(mine) & set(theirs) if mine[k] != theirs[k])
        detail = (f"missing {missing[:3]}" if missing else f"unexpected {extra[:3]}" if extra else
                  f"{shape[0]} has shape {list(theirs[shape[0]])}, not {list(mine[shape[0]])}")
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not match the trajectory's model ({detail}); "
            "measure one model's checkpoints at a time"
        )
    return lm
