"""What every group of settings is made of (memoryd/settings.py): a frozen, strict model, and ``setting`` — a
field with its default, its meaning and its flat name."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.config import JsonDict


def setting(default: Any, help: str, *, flat: str | None = None, **bounds: Any) -> Any:
    """A setting: its default, what it means (the docs' words), its flat name when not the field's, its bounds
    (``gt``, ``ge``, ``le``: pydantic's)."""
    extra: JsonDict | None = {"flat": flat} if flat else None
    return Field(default, description=help, json_schema_extra=extra, **bounds)


class Group(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
