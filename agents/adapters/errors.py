"""What an adapter raises when an engine hands it something it does not understand, or when the controller
asks for something the engine cannot run. Either way nothing is posted nor written."""

from __future__ import annotations


class EngineFormatError(ValueError):
    """A dump, metrics page or server answer of an unexpected shape or version.

    The message names the engine, its version and the field, so an operator can tell an engine upgrade
    (a renamed key) from a misconfiguration (a recorder mode we do not read).
    """

    def __init__(self, engine: str, version: str, field: str, problem: str):
        self.engine, self.version, self.field, self.problem = engine, version, field, problem
        super().__init__(f"{engine} {version}: {field}: {problem}")


class PlacementRefused(ValueError):
    """A controller placement the adapter will not hand to the engine (written nowhere)."""
