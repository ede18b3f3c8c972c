"""The machinery of `resolvent.starlette`, one concern a module: a request's CALL scope and
its settling (`requests.py`), what a framework reads of a wrapper and of its route
(`routes.py`), and a Starlette endpoint's call arguments (`arguments.py`). The public module
keeps `inject`, `refused` and the wrappers every request runs through; like it, these need
Starlette, and the core never imports them."""
