"""``python -m resolvent`` and the ``resolvent`` console script.

```
resolvent graph module:function [--container module:name] [--format text|mermaid|dot]
```
"""

from __future__ import annotations

import sys

from ._tools.cli import main

__all__ = ("main",)

if __name__ == "__main__":
    sys.exit(main())
