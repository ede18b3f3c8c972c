"""A value as stored: a line with its schema version, then the model's JSON. Writing
refuses a value of the wrong model or over the size limit; reading refuses a newer
version and migrates (or refuses) an older one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ValidationError

from .._integration import StateError, StateKey, StateTooLarge

__all__ = ("Codec",)

M = TypeVar("M", bound=BaseModel)


class Codec(Generic[M]):
    """How a kind's values become bytes and back; a base of `State`, which sets these."""

    name: str
    model: type[M]
    max_size: int
    version: int
    migrate: Callable[[int, Any], Any] | None
    _header: bytes

    def _encode(self, handle: str, value: Any) -> bytes:
        if not isinstance(value, self.model):
            raise StateError(
                f"{self.name} {handle!r}: the value to save is a {type(value).__qualname__}, "
                f"not a {self.model.__qualname__}; nothing was saved.\n"
                f"  fix: assign a {self.model.__qualname__} to Held.value"
            )
        data = self._header + value.model_dump_json().encode()
        if len(data) > self.max_size:
            raise StateTooLarge(
                f"{self.name} {handle!r}: the new value takes {len(data):,} bytes, over the "
                f"limit of {self.max_size:,}; nothing was saved.\n"
                f"  fix: keep less in a {self.name}, or raise State({self.name!r}, ..., "
                "max_size=...)"
            )
        return data

    def _decode(self, key: StateKey, data: bytes) -> M:
        header, _, payload = data.partition(b"\n")
        try:
            version = int(header)
        except ValueError:
            version = -1
        if version > self.version:  # a newer worker wrote it: never migrate it backwards
            raise StateError(
                f"{self.name} {key.handle!r}: the stored value has schema version {version}, "
                f"newer than this server's version {self.version}; it was neither read nor "
                "changed.\n"
                f"  fix: finish deploying the server with State({self.name!r}, ..., "
                f"version={version}) to every worker, and keep older workers out of rotation "
                "until then"
            )
        try:
            if version == self.version:
                return self.model.model_validate_json(payload)
            if version >= 1 and self.migrate is not None:
                import json

                return self.model.model_validate(self.migrate(version, json.loads(payload)))
        except (ValidationError, ValueError) as exc:
            raise StateError(
                f"{self.name} {key.handle!r}: the stored value (schema version {version}) "
                f"does not validate as {self.model.__qualname__} (version {self.version}): "
                f"{_first_line(exc)}.\n"
                f"  fix: pass State({self.name!r}, ..., migrate=...) to turn old values "
                "into valid ones, or keep the model compatible"
            ) from exc
        raise StateError(
            f"{self.name} {key.handle!r}: the stored value has schema version {version}, "
            f"and this server reads version {self.version}.\n"
            f"  fix: pass State({self.name!r}, ..., migrate=...) to convert older versions"
        )


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return " ".join(line.strip() for line in text[:3]) if text else type(exc).__name__
