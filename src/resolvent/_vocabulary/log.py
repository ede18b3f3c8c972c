"""The ``resolvent`` logger, for failures nobody else receives.

Never imports :mod:`logging` at import time, and never logs what a caller also receives,
but at DEBUG (the whole chain of a failed start, whose error says its cause in one line).
"""

from __future__ import annotations

__all__ = ("logger",)


class _Logger:
    """The ``resolvent`` logger, looked up when something fails.

    Only failures nobody else receives are logged, so ``import resolvent`` does not pay
    for importing :mod:`logging`. Records name the caller, as a plain logger's would.
    """

    __slots__ = ()

    def error(self, msg: str, *args: object, exc_info: BaseException | None = None) -> None:
        import logging

        logging.getLogger("resolvent").error(msg, *args, exc_info=exc_info, stacklevel=2)

    def debug(self, msg: str, *args: object, exc_info: BaseException | None = None) -> None:
        import logging

        logging.getLogger("resolvent").debug(msg, *args, exc_info=exc_info, stacklevel=2)

    def failed(self, msg: str, *args: object, error: BaseException) -> None:
        """Log *error* at ERROR in one line, ``msg: Type: text``; its traceback rides along
        only when the ``resolvent`` logger is enabled for DEBUG (a user asked for detail).

        The caller receives the error itself (raised, grouped, or as a note), so by default
        the log says what failed where, once, without a traceback per finalizer.
        """
        import logging

        log = logging.getLogger("resolvent")
        text = str(error).partition("\n")[0]
        summary = f"{type(error).__name__}: {text}" if text else type(error).__name__
        detail = error if log.isEnabledFor(logging.DEBUG) else None
        log.error(msg + ": %s", *args, summary, exc_info=detail, stacklevel=2)


logger = _Logger()
