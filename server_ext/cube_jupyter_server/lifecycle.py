"""Starting and stopping the notebook backend without taking the Jupyter server down with it.

A cluster API that is briefly unreachable at startup (informers that cannot list) must neither kill
the server nor leave it serving empty lists as if nobody had servers: the backend is retried in the
background, and until it is up every notebook request answers 503 naming what failed.
"""

from __future__ import annotations

import asyncio
import logging

from cube_jupyter.errors import BackendUnavailable, CubeError
from cube_jupyter.notebooks.backend import NotebookBackend

STARTER_SETTING = "cube_backend_starter"


class BackendStarter:
    """Runs `backend.start()` until it succeeds, with a growing pause between attempts."""

    def __init__(
        self,
        backend: NotebookBackend,
        log: logging.Logger | logging.LoggerAdapter[logging.Logger],
        first_retry_seconds: float = 1.0,
        max_retry_seconds: float = 30.0,
    ) -> None:
        self.backend = backend
        self.log = log
        self.first_retry_seconds = first_retry_seconds
        self.max_retry_seconds = max_retry_seconds
        self.ready = False
        self.error: str | None = None
        self._retrying: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Try once now, so the first request normally sees a started backend; retry in the
        background if that failed."""
        if not await self._attempt():
            self._retrying = asyncio.create_task(self._retry(), name="cube-backend-start")

    def require_ready(self) -> None:
        """Raise BackendUnavailable (503) until the backend has started."""
        if not self.ready:
            why = self.error or "still starting"
            raise BackendUnavailable(f"the notebook backend is not available yet ({why}); retrying")

    async def close(self) -> None:
        """Stop retrying and stop the backend's background work; a failure here is logged, never
        raised, so shutting the server down always completes."""
        if self._retrying is not None:
            self._retrying.cancel()
            await asyncio.gather(self._retrying, return_exceptions=True)
            self._retrying = None
        try:
            await self.backend.close()
        except Exception:
            self.log.exception("cube-jupyter: stopping the notebook backend failed")
        self.ready = False

    async def _retry(self) -> None:
        delay = self.first_retry_seconds
        while True:
            await asyncio.sleep(delay)
            if await self._attempt():
                return
            delay = min(delay * 2, self.max_retry_seconds)

    async def _attempt(self) -> bool:
        try:
            await self.backend.start()
        except Exception as exc:  # whatever it is, the server keeps serving and says why in 503s
            self.error = exc.message if isinstance(exc, CubeError) else f"{type(exc).__name__}: {exc}"
            self.log.error("cube-jupyter: the notebook backend did not start: %s", self.error)
            return False
        if self.error is not None:
            self.log.info("cube-jupyter: the notebook backend started after earlier failures")
        self.ready, self.error = True, None
        return True
