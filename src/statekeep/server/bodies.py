"""Reading request bodies within ``max_request_bytes`` (413 beyond it, JSON or multipart alike)."""

from __future__ import annotations

from typing import Any

from fastapi import Request
from starlette.datastructures import FormData, UploadFile
from starlette.exceptions import HTTPException

from statekeep.errors import InvalidArgumentError, ValueTooLargeError


def check_length(request: Request, limit: int) -> None:
    """413 up front when ``Content-Length`` already says the body is too large."""
    length = request.headers.get("content-length")
    if length is not None and length.isdigit() and int(length) > limit:
        raise ValueTooLargeError(f"request body of {length} bytes exceeds the limit of {limit} bytes")


async def read_part(part: Any, limit: int) -> bytes | None:
    """A multipart part's bytes (None when absent); :class:`ValueTooLargeError` beyond ``limit``."""
    if part is None:
        return None
    if isinstance(part, UploadFile):
        data: bytes = await part.read(limit + 1)
        if len(data) > limit:
            raise ValueTooLargeError(f"upload exceeds the limit of {limit} bytes")
        return data
    data = part.encode("utf-8")
    if len(data) > limit:
        raise ValueTooLargeError(f"form field exceeds the limit of {limit} bytes")
    return data


async def read_body(request: Request, limit: int) -> bytes:
    """The raw body, streamed; :class:`ValueTooLargeError` as soon as it passes ``limit``."""
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise ValueTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def read_form(request: Request, limit: int, *, max_files: int, max_fields: int) -> FormData:
    """The multipart form, each part up to ``limit`` bytes (Starlette's own default for a field
    is 1 MiB, which would make a large value a 400 in multipart but a 413 as JSON)."""
    try:
        return await request.form(max_files=max_files, max_fields=max_fields, max_part_size=limit)
    except HTTPException as e:  # a malformed body, too many parts, or a part over max_part_size
        if "maximum size" in str(e.detail):
            raise ValueTooLargeError(f"a multipart part exceeds the limit of {limit} bytes") from None
        raise InvalidArgumentError(f"malformed multipart body: {e.detail}") from None
