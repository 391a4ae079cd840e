"""memory-mcp: one shared memory and one task board for AI coding agents, over MCP and REST."""


def __getattr__(name: str) -> str:
    # Looked up on first use: importlib.metadata costs tens of ms that a Claude Code hook does not need.
    if name != "__version__":
        raise AttributeError(f"module 'app' has no attribute {name!r}")
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memory-mcp")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "0+unknown"
