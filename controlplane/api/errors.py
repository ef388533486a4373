"""The error body every endpoint may answer with, documented once for the OpenAPI schema."""

from __future__ import annotations

from pydantic import BaseModel, Field

RETRY_AFTER = "1"  # seconds, on a 503: agents and Alertmanager back off on their own; earlier is not worth it


class ErrorOut(BaseModel):
    detail: str = Field(description="what is wrong, naming the field or the conflict, and what to do")
    errors: list[dict] | None = Field(default=None, description="422: one entry per invalid field (loc, msg, type)")
    code: str | None = Field(default=None, description="for programs: what to do about it (agents.protocol's "
                                                       "PLACEMENT_UNKNOWN: post again with running_placement)")


ERROR_RESPONSES = {
    code: {"model": ErrorOut, "description": description}
    for code, description in (
        (400, "malformed request"),
        (401, "missing, unknown or revoked token"),
        (403, "the token's role may not do this"),
        (404, "no such deployment, pool, action or version"),
        (409, "conflicts with stored state (model shape, policy mode, action status, placement version, pool size "
              "bounds)"),
        (412, "If-Match names an older policy version"),
        (413, "request body over the size limit"),
        (422, "invalid field values"),
        (503, "nothing was stored: the database is busy or unreachable, the controller is overloaded, or this "
              "replica lost the leadership during the request; retry after Retry-After seconds"),
    )
}
