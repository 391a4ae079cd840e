"""Tests against the real programs memory-mcp shares its table with (``make interop``)."""
