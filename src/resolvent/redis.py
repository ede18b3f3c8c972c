"""`RedisStore`: state in Redis or Valkey, shared by every worker on every host.

Needs ``pip install "resolvent[redis]"`` (the `coredis` client, which runs on asyncio and
trio). Importing this module imports coredis; ``import resolvent`` does not, and
``open_store("redis://...")`` imports it only when it opens such a URL.

```python
async with RedisStore.connect("redis://127.0.0.1:6379/0") as store:
    ...
```
"""

from __future__ import annotations

from ._stores.redis import RedisStore

__all__ = ("RedisStore",)
