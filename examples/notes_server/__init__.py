"""A notes MCP server built with resolvent: run it with ``python -m examples.notes_server``.

See `server.py` for the tools and resolvers.
"""
