"""API tokens (admin only). The secret is returned once, at creation; only its hash is stored."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Path

from controlplane.api.deps import AdminDep, NowDep, SessionDep
from controlplane.api.schemas import TOKEN_NAME_PATTERN, TokenIn, TokenOut
from controlplane.store import tokens
from controlplane.store.timestamps import seconds

router = APIRouter(prefix="/v1/tokens", tags=["tokens"])
TokenName = Annotated[str, Path(max_length=128, pattern=TOKEN_NAME_PATTERN)]


@router.post("", status_code=201)
def create_token(body: TokenIn, session: SessionDep, now: NowDep, caller: AdminDep) -> dict:
    with session.begin():
        try:
            secret = tokens.create(session, name=body.name, role=body.role, created_by=caller.name, now=now)
        except tokens.NameTaken as exc:
            raise HTTPException(409, str(exc)) from None
        except ValueError as exc:
            raise HTTPException(422, str(exc)) from None
    return {"name": body.name, "role": body.role, "token": secret}


@router.get("", response_model=list[TokenOut])
def list_tokens(session: SessionDep, _: AdminDep) -> list[TokenOut]:
    return [TokenOut(name=t.name, role=t.role, prefix=t.prefix, created_by=t.created_by,
                     created_at=seconds(t.created_at), revoked_at=seconds(t.revoked_at) if t.revoked_at else None)
            for t in tokens.list_all(session)]


@router.delete("/{name}", status_code=204)
def revoke_token(name: TokenName, session: SessionDep, now: NowDep, _: AdminDep) -> None:
    with session.begin():
        if not tokens.revoke(session, name, now=now):
            raise HTTPException(404, f"no active token named {name!r}")
