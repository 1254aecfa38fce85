"""Wire models shared by every namespace: the base class and the common pieces.

pydantic v2 at the edges: ``extra="forbid"`` so a misspelt field is an error, ``strict=True`` so a wrong type is
an error rather than a silent coercion, ``frozen=True``. ``schemas/`` is generated from these models.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class Wire(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


class Empty(Wire):
    pass


OwnerToken = Field(default=None, description="The owner token from config/owner.token (memoryctl sends it).")
WorkspaceRef = Field(
    min_length=1,
    max_length=4096,
    description="A workspace id (ws_…) or an absolute path inside a registered workspace.",
)
