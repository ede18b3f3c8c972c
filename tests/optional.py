"""The packages that only some tests need, and how such a test skips without them.

The integrations (the package's extras) and what their tests drive them with. A test
module importing one that is not installed is skipped by conftest.py, with the missing
package in the summary, so the suite also runs on an install with fewer extras (as CI's
lowest-dependency job does); any other import error still fails.
"""

from __future__ import annotations

import pytest

OPTIONAL_PACKAGES = {
    "mcp": "the mcp extra",
    "mcp_types": "the mcp extra",
    "starlette": "the starlette extra",
    "fastapi": "fastapi",
    "uvicorn": "uvicorn",
    "httpx": "httpx",
    "opentelemetry": "the otel extra",
}


def skip_if_optional(error: BaseException | None, where: str) -> None:
    """Skip the running test (or module) when *error* says an optional package is missing."""
    if isinstance(error, ModuleNotFoundError) and error.name:
        top = error.name.partition(".")[0]
        if top in OPTIONAL_PACKAGES:
            pytest.skip(
                f"{where} needs {top!r} ({OPTIONAL_PACKAGES[top]}), which is not installed",
                allow_module_level=True,
            )
