"""A shopping-cart MCP server: state across calls with resolvent.State.

``python -m examples.cart_server --transport http --port 8000 --store sqlite:///carts.db``
"""
