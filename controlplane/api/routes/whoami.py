"""Who the caller is: lets the dashboard show read-only controls to viewers instead of failing on click."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel

from controlplane.api.deps import Caller, require

router = APIRouter(prefix="/v1/whoami", tags=["tokens"])


class WhoAmI(BaseModel):
    name: str
    role: str


# any valid token answers, agent and alerts tokens included; no token is an anonymous viewer when reads are open
AnyCaller = Annotated[Caller, Depends(require("viewer", "anonymous", "agent", "alerts"))]


@router.get("", response_model=WhoAmI)
def whoami(caller: AnyCaller) -> WhoAmI:
    return WhoAmI(name=caller.name, role=caller.role)
