"""The HTTP API: agents post snapshots; people and tools read overviews and set policies."""
