"""KServe's log lines of the model server: a client's error in one line."""

from __future__ import annotations

import logging


class ClientErrorsInOneLine(logging.Filter):
    """KServe logs every 4xx with a traceback at ERROR; a client's bad request is one WARNING line, not a server
    fault."""

    def filter(self, record: logging.LogRecord) -> bool:
        from kserve.errors import InvalidInput, ModelNotFound

        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, (InvalidInput, ModelNotFound)):
            record.msg, record.args, record.exc_info = f"refused a request: {error}", (), None
            record.levelno, record.levelname = logging.WARNING, "WARNING"
        return True
