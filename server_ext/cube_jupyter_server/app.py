"""The Jupyter server extension: validates admin config at startup, wires the core to handlers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.serverapp import ServerApp

from cube_jupyter.access import isolation_statement
from cube_jupyter.config import CONFIG_CLASSES, load_settings
from cube_jupyter.errors import ConfigError, CubeError
from cube_jupyter.services import Workbench
from cube_jupyter_server.authorizer import HeaderIdentityProvider, require_cube_authorizer
from cube_jupyter_server.gpu_handlers import GPU_HANDLERS, GPU_SETTING, workbench_kernels
from cube_jupyter_server.handlers import HANDLERS
from cube_jupyter_server.identity import make_caller
from cube_jupyter_server.info import INFO_HANDLERS, INFO_SETTING, NOT_SERVED_HANDLERS, server_info
from cube_jupyter_server.job_handlers import JOB_HANDLERS
from cube_jupyter_server.lifecycle import STARTER_SETTING, BackendStarter
from cube_jupyter_server.pipeline_handlers import PIPELINE_HANDLERS
from cube_jupyter_server.router import ROUTE_PATTERN, NotebookRouterHandler
from cube_jupyter_server.schedule_handlers import SCHEDULE_HANDLERS

T = TypeVar("T")


class CubeJupyterApp(ExtensionApp):
    name = "cube_jupyter_server"
    load_other_extensions = True
    # Every Cube* Configurable (and the bases whose traits they share), for --help-all and
    # --generate-config; `load_settings` loads them all once, in `_initialize_settings`.
    classes = [*ExtensionApp.classes, *CONFIG_CLASSES]

    def initialize_settings(self) -> None:
        self._or_exit(self._initialize_settings)

    def _initialize_settings(self) -> None:
        assert self.serverapp is not None
        serverapp = self.serverapp
        settings = self._or_exit(lambda: load_settings(serverapp.config, base_url=serverapp.base_url))
        for warning in settings.deprecations:
            self.log.warning("cube-jupyter: %s", warning)
        self.cube_settings = settings
        if not settings.user_server:
            require_cube_authorizer(serverapp)
        # Behind the trusted header many users reach this server: each reads only their own files
        # and runs code here only as `access.require_local_execution` allows.
        multi_user = not settings.user_server and isinstance(
            serverapp.identity_provider, HeaderIdentityProvider
        )
        if multi_user:
            self.log.warning("cube-jupyter: %s", isolation_statement(settings))
        # The composition root: one cluster connection, one GPU ledger, every service.
        workbench = Workbench(
            settings,
            root_dir=serverapp.root_dir,
            base_url=serverapp.base_url,
            multi_user=multi_user,
            kernels=workbench_kernels(serverapp),
        )
        self.workbench = workbench
        # A user server reads its owner's notebook servers (the GPU quota counts them), never
        # supervising or culling them; the central workbench supervises them and serves the spawner.
        self.backend_starter: BackendStarter | None = None
        if not settings.user_server:
            self.backend_starter = self._or_exit(lambda: BackendStarter(workbench.notebook_backend, self.log))
            self.settings[STARTER_SETTING] = self.backend_starter
        self.settings.update(
            {
                GPU_SETTING: self._or_exit(lambda: workbench.gpu),
                "cube_jobs": self._or_exit(lambda: workbench.jobs),
                "cube_settings": settings,
                "cube_notebooks": None if settings.user_server else workbench.notebooks,
                "cube_pipelines": self._or_exit(lambda: workbench.pipelines),
                "cube_schedules": None
                if settings.user_server
                else self._or_exit(lambda: workbench.schedules),
                "cube_caller": make_caller(settings),
                INFO_SETTING: server_info(settings),
            }
        )
        if settings.user_server:
            self.log.info(
                "cube-jupyter: user server of %r (%s backend): pipelines, jobs and GPU",
                settings.workbench.default_user,
                settings.workbench.backend,
            )
        else:
            self.log.info(
                "cube-jupyter: workbench, %s backend, %d profile(s): %s",
                settings.workbench.backend,
                len(settings.notebooks.profiles),
                ", ".join(p.name for p in settings.notebooks.profiles),
            )

    def initialize_handlers(self) -> None:
        self.handlers.extend(INFO_HANDLERS)
        if not self.cube_settings.user_server:
            self.handlers.extend(HANDLERS)
            self.handlers.extend(SCHEDULE_HANDLERS)
            self.handlers.append((ROUTE_PATTERN, NotebookRouterHandler))
        self.handlers.extend(PIPELINE_HANDLERS)
        self.handlers.extend(GPU_HANDLERS)
        self.handlers.extend(JOB_HANDLERS)
        self.handlers.extend(NOT_SERVED_HANDLERS)

    async def _start_jupyter_server_extension(self, serverapp: ServerApp) -> None:
        workbench = self.workbench
        if self.backend_starter is not None:
            await self.backend_starter.start()  # retries in the background; 503s until it is up
        else:
            try:
                await workbench.notebook_backend.start(supervise=False)
            except CubeError as exc:  # GPU quota checks answer 503 saying why; the rest serves on
                self.log.error("cube-jupyter: the owner's notebook servers cannot be read: %s", exc.message)
        await workbench.pipelines.start()  # a target that cannot start (no Argo) is said and left out
        await workbench.gpu.start()
        try:
            await workbench.jobs.start()
        except CubeError as exc:  # jobs answer 503 saying why; the rest of the workbench serves on
            self.log.error("cube-jupyter: jobs are off: %s", exc.message)
        if not self.cube_settings.user_server:
            await workbench.schedules.start()  # the scheduler: here, never in a user's server

    async def stop_extension(self) -> None:
        workbench = self.workbench
        scheduler = (
            () if self.cube_settings.user_server else (("stopping the scheduler", workbench.schedules.close),)
        )
        for what, close in (
            *scheduler,
            ("stopping pipeline runs", workbench.pipelines.close),
            ("stopping GPU sampling", workbench.gpu.close),
            ("stopping jobs", workbench.jobs.close),
        ):
            try:
                await close()
            except Exception:  # shutting down must always complete
                self.log.exception("cube-jupyter: %s failed", what)
        if self.backend_starter is not None:
            await self.backend_starter.close()
        else:
            await workbench.notebook_backend.close()
        try:  # last: every feature's informers stop with the cluster connection, once
            await workbench.close()
        except Exception:  # shutting down must always complete
            self.log.exception("cube-jupyter: closing the cluster connection failed")

    def _or_exit(self, load: Callable[[], T]) -> T:
        """Invalid config, or anything else failing while the workbench is set up, stops the server
        here with a message instead of leaving it running without /cube."""
        try:
            return load()
        except ConfigError as exc:
            self.log.critical("cube-jupyter: invalid configuration: %s", exc.message)
            # SystemExit passes through jupyter_server's extension loader, which logs and
            # swallows ordinary exceptions and would leave the server running without us.
            raise SystemExit(f"cube-jupyter: invalid configuration: {exc.message}") from None
        except Exception as exc:
            why = exc.message if isinstance(exc, CubeError) else f"{type(exc).__name__}: {exc}"
            self.log.debug("cube-jupyter: setup failed", exc_info=True)  # the details, with --debug
            self.log.critical("cube-jupyter: could not start: %s", why)
            raise SystemExit(f"cube-jupyter: could not start: {why}") from None
