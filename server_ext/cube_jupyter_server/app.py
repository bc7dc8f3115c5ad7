"""The Jupyter server extension: validates admin config at startup, wires the core to handlers."""

from __future__ import annotations

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.serverapp import ServerApp

from cube_jupyter.backends import make_notebook_backend
from cube_jupyter.config import Settings, load_settings
from cube_jupyter.errors import ConfigError
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter_server.handlers import HANDLERS
from cube_jupyter_server.identity import make_caller
from cube_jupyter_server.router import ROUTE_PATTERN, NotebookRouterHandler


class CubeJupyterApp(ExtensionApp):
    name = "cube_jupyter_server"
    load_other_extensions = True

    def initialize_settings(self) -> None:
        assert self.serverapp is not None
        settings = self._load_settings_or_exit(self.serverapp)
        backend = make_notebook_backend(settings, base_url=self.serverapp.base_url)
        self.cube_settings = settings
        self.notebook_service = NotebookService(settings, backend)
        self.settings.update(
            {
                "cube_settings": settings,
                "cube_notebooks": self.notebook_service,
                "cube_caller": make_caller(settings),
            }
        )
        self.log.info(
            "cube-jupyter: %s backend, %d profile(s): %s",
            settings.workbench.backend,
            len(settings.profiles),
            ", ".join(p.name for p in settings.profiles),
        )

    def initialize_handlers(self) -> None:
        self.handlers.extend(HANDLERS)
        self.handlers.append((ROUTE_PATTERN, NotebookRouterHandler))

    async def _start_jupyter_server_extension(self, serverapp: ServerApp) -> None:
        await self.notebook_service.backend.start()

    async def stop_extension(self) -> None:
        await self.notebook_service.backend.close()

    def _load_settings_or_exit(self, serverapp: ServerApp) -> Settings:
        """Invalid config stops the server here, naming the field, instead of failing later."""
        try:
            return load_settings(serverapp.config)
        except ConfigError as exc:
            self.log.critical("cube-jupyter: invalid configuration: %s", exc.message)
            # SystemExit passes through jupyter_server's extension loader, which logs and
            # swallows ordinary exceptions and would leave the server running without us.
            raise SystemExit(f"cube-jupyter: invalid configuration: {exc.message}") from None
