"""locret: ask questions of documents far longer than a normal KV cache could hold.

The library comes first: `locret_cli.api.load_session(...).ask(...)`. The `locret` command sits on top of it.
"""

__version__ = "0.1.0"
