"""Tiny random models of every family in the site table (d = 32, 2 layers, vocab 320), and a
writer of the Hugging Face Hub cache layout."""

from __future__ import annotations

VOCAB = 320
D = 32

_COMMON_DEC = dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=2,
                   intermediate_size=64, vocab_size=VOCAB, max_position_embeddings=64,
                   bos_token_id=1, eos_token_id=2, pad_token_id=0,
                   rms_norm_eps=1e-12)  # RMSNorm: gradient ⟂ input up to eps (tested)
_GQA = dict(num_key_value_heads=1)

#: model_type -> (config class name, kwargs, arch)
FAMILY_CONFIGS: dict[str, tuple[str, dict, str]] = {
    "gpt2": ("GPT2Config", dict(n_embd=D, n_layer=2, n_head=2, n_inner=64, vocab_size=VOCAB,
                                n_positions=64, bos_token_id=1, eos_token_id=2), "decoder"),
    "gpt_neox": ("GPTNeoXConfig", dict(_COMMON_DEC), "decoder"),
    "llama": ("LlamaConfig", dict(_COMMON_DEC, **_GQA), "decoder"),
    "mistral": ("MistralConfig", dict(_COMMON_DEC, **_GQA), "decoder"),
    "qwen2": ("Qwen2Config", dict(_COMMON_DEC, **_GQA), "decoder"),
    "qwen3": ("Qwen3Config", dict(_COMMON_DEC, head_dim=16, **_GQA), "decoder"),
    "phi3": ("Phi3Config", dict(_COMMON_DEC, **_GQA), "decoder"),
    "gemma": ("GemmaConfig", dict(_COMMON_DEC, head_dim=16, **_GQA), "decoder"),
    "gemma2": ("Gemma2Config", dict(_COMMON_DEC, head_dim=16, **_GQA), "decoder"),
    "olmo": ("OlmoConfig", dict(_COMMON_DEC), "decoder"),
    "olmo2": ("Olmo2Config", dict(_COMMON_DEC), "decoder"),
    "bert": ("BertConfig", dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=2,
                                intermediate_size=64, vocab_size=VOCAB,
                                max_position_embeddings=64, pad_token_id=0), "encoder"),
    "roberta": ("RobertaConfig", dict(hidden_size=D, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64, vocab_size=VOCAB,
                                      max_position_embeddings=70, pad_token_id=1), "encoder"),
    "modernbert": ("ModernBertConfig", dict(hidden_size=D, num_hidden_layers=2,
                                            num_attention_heads=2, intermediate_size=64,
                                            vocab_size=VOCAB, max_position_embeddings=64,
                                            pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                            cls_token_id=1, sep_token_id=2), "encoder"),
}

#: the sequential GPT-NeoX variant (use_parallel_residual=False), which has a resid_mid
NEOX_SEQUENTIAL = dict(_COMMON_DEC, use_parallel_residual=False)


def tiny_model(model_type: str, *, seed: int = 0, **overrides):
    """A freshly initialised tiny model of ``model_type`` with its LM head (eval mode)."""
    import torch
    import transformers

    cls_name, kw, arch = FAMILY_CONFIGS[model_type]
    cfg = getattr(transformers, cls_name)(**dict(kw, **overrides))
    torch.manual_seed(seed)
    auto = transformers.AutoModelForMaskedLM if arch == "encoder" else transformers.AutoModelForCausalLM
    return auto.from_config(cfg).eval()


def write_hub_revision(cache, repo_id: str, revision: str, save) -> str:
    """Write one revision of ``repo_id`` into a Hub cache the way a download leaves it.

    ``save(dir)`` writes the files (``save_pretrained``). Files become content-addressed blobs
    (``blobs/<sha256>``) linked from ``snapshots/<commit>/``; ``refs/<revision>`` holds the commit,
    a hash of the revision's files. Returns the commit.
    """
    import hashlib
    import os
    import shutil
    import tempfile
    from pathlib import Path

    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    (repo / "blobs").mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        save(tmp)
        files = sorted(p for p in Path(tmp).rglob("*") if p.is_file())
        h = hashlib.sha1(revision.encode())
        digests = {}
        for f in files:
            d = hashlib.sha256(f.read_bytes()).hexdigest()
            digests[f] = d
            h.update(f"{f.relative_to(tmp)}:{d}".encode())
        commit = h.hexdigest()
        snap = repo / "snapshots" / commit
        for f in files:
            blob = repo / "blobs" / digests[f]
            if not blob.exists():
                shutil.copyfile(f, blob)
            link = snap / f.relative_to(tmp)
            link.parent.mkdir(parents=True, exist_ok=True)
            if not link.exists():
                os.symlink(os.path.relpath(blob, link.parent), link)
    ref = repo / "refs" / revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text(commit)
    return commit


def build_tiny_hub(cache, families, *, revisions=("step0", "step1", "step8")) -> dict[str, dict]:
    """Write ``tiny/<family>`` repositories with one tiny model per revision (a different seed
    each) into the Hub cache ``cache``. Returns {repo_id: {revision: commit}}."""
    out: dict[str, dict] = {}
    for fam in families:
        repo_id = f"tiny/{fam}"
        out[repo_id] = {}
        for i, rev in enumerate(revisions):
            model = tiny_model(fam, seed=i)
            out[repo_id][rev] = write_hub_revision(cache, repo_id, rev, model.save_pretrained)
    return out


def save_bin(model, directory) -> None:
    """Save ``model`` the way Pythia's step branches are: ``config.json`` + ``pytorch_model.bin``.

    transformers 5 writes safetensors only (``save_pretrained(..., safe_serialization=False)`` is
    ignored), so the model is saved with ``save_pretrained`` and its on-disk state dict (keys as
    transformers writes them: GPT-NeoX's head as ``embed_out``) is rewritten with ``torch.save``.
    """
    from pathlib import Path

    import torch
    from safetensors.torch import load_file

    model.save_pretrained(directory)
    st = Path(directory) / "model.safetensors"
    torch.save(load_file(str(st)), Path(directory) / "pytorch_model.bin")
    st.unlink()


def save_sharded(model, directory) -> None:
    """``save_pretrained`` into several safetensors shards plus ``model.safetensors.index.json``."""
    model.save_pretrained(directory, max_shard_size="40KB")
