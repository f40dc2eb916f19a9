"""Uploaded ONNX files: streamed to disk with a size cap, checked, kept by content.

An upload is written to ``<data_dir>/onnx/`` under a temporary name while its sha256 is taken
and its size counted (413 past ``max_onnx_bytes``). Pickles are refused from the first bytes
and the client's file name (415, the ONNX reader's reason: unpickling runs code); then the
ONNX reader parses and checks it (``gpucast.graph.onnx.reader.read``, 422 with its line for a
corrupt or truncated file). A good file is renamed to ``<sha256>.onnx``: the same bytes always
land at the same path, so the job (and its key, which includes the file's digest) is the same
for every upload of it, and the cache answers the second one.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from pathlib import Path

from gpucast.service.cache import ServiceError
from gpucast.service.limits import Settings

_CHUNK = 1 << 20


async def save_upload(upload, settings: Settings) -> tuple[Path, bytes, str]:
    """Stream ``upload`` (a Starlette UploadFile) to a temporary file: (path, first bytes, sha256)."""
    root = settings.data_dir / "onnx"
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".upload-{uuid.uuid4().hex}.tmp"
    h = hashlib.sha256()
    size, head = 0, b""
    try:
        with open(tmp, "wb") as out:
            while chunk := await upload.read(_CHUNK):
                size += len(chunk)
                if size > settings.max_onnx_bytes:
                    raise ServiceError(413, f"ONNX file is over the limit of {settings.max_onnx_bytes / 2**20:g} MiB "
                                            f"(max_onnx_bytes; keep weights as ONNX external data)")
                if len(head) < 8:
                    head += chunk[:8 - len(head)]
                h.update(chunk)
                out.write(chunk)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return tmp, head, h.hexdigest()


def check_and_keep(tmp: Path, head: bytes, digest: str, filename: str | None, settings: Settings) -> Path:
    """In a worker thread: refuse pickles (415) and bad ONNX (422), else keep the file by content."""
    from gpucast.graph.onnx.reader import OnnxError, read, refuse_pickle

    final = settings.data_dir / "onnx" / f"{digest}.onnx"
    shown = Path(os.path.basename(filename or "upload.onnx") or "upload.onnx")
    try:
        try:
            refuse_pickle(shown, head)
        except OnnxError as exc:
            raise ServiceError(415, " ".join(str(exc).split())) from None
        if final.is_file():
            return final  # the same bytes were checked before
        try:
            read(tmp, max_bytes=settings.max_onnx_bytes)
        except OnnxError as exc:
            msg = " ".join(str(exc).split()).replace(repr(str(tmp)), repr(str(shown)))
            raise ServiceError(422, msg) from None
        os.replace(tmp, final)
        return final
    finally:
        tmp.unlink(missing_ok=True)
