"""A user's own PyTorch code as a job: ``FILE.py:FUNCTION`` factories for the CLI.

``load_callable("my_model.py:build")`` imports the file under a private module name and returns
the named attribute, which must be callable. The file runs with the user's own rights, as
``python my_model.py`` would: this is for a user's CLI on their own code. Services never call
it (they accept no code). Pickled models (``.pt``, ``.pth``, ``.pkl``...) are refused: loading one
runs code hidden in data.

``shape_input_fn`` makes the input factory for ``--input-shape`` / ``--input-dtype``: one tensor
``(batch, *shape)`` of that dtype (integer inputs are zeros: token ids whose values do not
matter on the meta device).
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
from pathlib import Path

from gpucast.job import JobError

INPUT_DTYPES = ("float32", "float16", "bfloat16", "int64", "int32", "bool")


def _split(ref: str, what: str) -> tuple[Path, str]:
    path, sep, name = ref.rpartition(":")
    if not sep or not path or not name.isidentifier():
        raise JobError(f"{what} must be FILE.py:FUNCTION, got {ref!r}")
    return Path(path), name


def load_callable(ref: str, what: str = "--module"):
    """The callable ``FUNCTION`` defined in ``FILE.py`` (see module docstring)."""
    from gpucast.graph.onnx.reader import PICKLE_SUFFIXES, _PICKLE_WHY

    path, name = _split(ref, what)
    if path.suffix.lower() in PICKLE_SUFFIXES:
        raise JobError(f"{what}: refusing {str(path)!r}, a pickled model: {_PICKLE_WHY}")
    if path.suffix.lower() != ".py":
        raise JobError(f"{what}: {str(path)!r} is not a Python file (.py)")
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise JobError(f"{what}: cannot read {str(path)!r}: {exc.strerror}") from None
    mod_name = f"gpucast_user_{hashlib.sha256(str(path.resolve()).encode() + source).hexdigest()[:12]}"
    module = sys.modules.get(mod_name)
    if module is None:
        spec = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:  # the user's file raised: one line naming it
            msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise JobError(f"{what}: {str(path)!r} raised {type(exc).__name__} on import: {msg}"[:400]) from None
        sys.modules[mod_name] = module
    fn = getattr(module, name, None)
    if fn is None:
        raise JobError(f"{what}: {str(path)!r} defines no {name!r}")
    if not callable(fn):
        raise JobError(f"{what}: {path.name}:{name} is not callable")
    return fn


def shape_input_fn(shape: tuple[int, ...], dtype: str = "float32"):
    if dtype not in INPUT_DTYPES:
        raise JobError(f"--input-dtype must be one of {', '.join(INPUT_DTYPES)}, got {dtype!r}")

    def input_fn(batch_size: int):
        import torch

        dt = getattr(torch, dtype)
        size = (batch_size,) + tuple(shape)
        return (torch.randn(size, dtype=dt) if dt.is_floating_point else torch.zeros(size, dtype=dt),)

    return input_fn


def module_job(ref: str, *, input_shape=None, input_dtype: str = "float32", input_fn_ref: str | None = None,
               loss_ref: str | None = None, **fields):
    """The Job for ``--module FILE.py:FUNCTION`` and its input description."""
    from gpucast.job import Job, _as_shape

    model_fn = load_callable(ref, "--module")
    if input_fn_ref:
        input_fn = load_callable(input_fn_ref, "--input-fn")
    elif input_shape:
        input_fn = shape_input_fn(_as_shape(input_shape), input_dtype)
    else:
        raise JobError("--module needs the input: --input-shape 3,224,224 (per sample) or --input-fn FILE.py:FUNCTION")
    loss_fn = load_callable(loss_ref, "--loss") if loss_ref else None
    path, name = _split(ref, "--module")
    digest = hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    tag = f"{path.resolve()}:{name}@{digest}"
    tag += f"|in={input_fn_ref}" if input_fn_ref else f"[{','.join(map(str, _as_shape(input_shape)))}:{input_dtype}]"
    if loss_ref:
        tag += f"|loss={loss_ref}"
    return Job.from_module(model_fn, input_fn, loss_fn=loss_fn, name=tag, **fields)
