"""The Jupyter server extension: validates admin config at startup, wires the core to handlers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from jupyter_server.extension.application import ExtensionApp
from jupyter_server.serverapp import ServerApp

from cube_jupyter.access import isolation_statement
from cube_jupyter.config import CONFIG_CLASSES, Settings, load_settings
from cube_jupyter.errors import ConfigError, CubeError
from cube_jupyter.gpu.service import GpuService
from cube_jupyter.jobs.backend import make_job_backend
from cube_jupyter.jobs.service import JobService
from cube_jupyter.kube import cluster_for
from cube_jupyter.ledger import GpuLedger
from cube_jupyter.notebooks.backend import make_notebook_backend
from cube_jupyter.notebooks.service import NotebookService
from cube_jupyter.pipelines.service import PipelineService
from cube_jupyter_server.authorizer import require_cube_authorizer
from cube_jupyter_server.gpu_handlers import GPU_HANDLERS, GPU_SETTING, workbench_kernels
from cube_jupyter_server.handlers import HANDLERS
from cube_jupyter_server.identity import TrustedHeaderIdentityProvider, make_caller
from cube_jupyter_server.info import INFO_HANDLERS, INFO_SETTING, NOT_SERVED_HANDLERS, server_info
from cube_jupyter_server.job_handlers import JOB_HANDLERS
from cube_jupyter_server.lifecycle import STARTER_SETTING, BackendStarter
from cube_jupyter_server.pipeline_handlers import PIPELINE_HANDLERS
from cube_jupyter_server.router import ROUTE_PATTERN, NotebookRouterHandler

if TYPE_CHECKING:
    from cube_jupyter.kube.cluster import Cluster
    from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns

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
        settings = self._or_exit(lambda: load_settings(serverapp.config))
        self.cube_settings = settings
        # One API client and one set of informers for notebooks, pipelines and jobs (kubernetes only).
        self.kube_cluster = self._or_exit(lambda: cluster_for(settings))
        cluster = self.kube_cluster
        # The notebook servers the GPU ledger counts: a user server reads the workbench's (the local
        # state, or its own namespace's Notebooks), never supervising or culling them.
        servers = self._or_exit(
            lambda: make_notebook_backend(settings, base_url=serverapp.base_url, cluster=cluster)
        )
        self.ledger_servers = servers
        if settings.user_server:
            ledger = GpuLedger(settings, servers, lock_dir=_lock_dir(settings))
            multi_user = False
            self.notebook_service: NotebookService | None = None
            self.backend_starter: BackendStarter | None = None
        else:
            require_cube_authorizer(serverapp)
            if not settings.workbench.workbench_url:  # what the servers it starts link back to
                settings.workbench.workbench_url = f"{serverapp.base_url}lab"
            ledger = GpuLedger(settings, servers, lock_dir=_lock_dir(settings))
            # Behind the trusted header many users reach this server: each reads only their own files
            # and runs code here only as `access.require_local_execution` allows.
            multi_user = isinstance(serverapp.identity_provider, TrustedHeaderIdentityProvider)
            if multi_user:
                self.log.warning("cube-jupyter: %s", isolation_statement(settings))
            self.notebook_service = NotebookService(settings, servers, ledger)
            self.backend_starter = BackendStarter(servers, self.log)
            self.settings[STARTER_SETTING] = self.backend_starter
        self.pipeline_service = PipelineService(
            settings, serverapp.root_dir, cluster=_cluster_runs(settings, cluster), multi_user=multi_user
        )
        kernels = workbench_kernels(serverapp)
        self.gpu_service = self._or_exit(
            lambda: GpuService(settings, ledger, None if settings.user_server else servers, kernels)
        )
        self.job_service = self._or_exit(
            lambda: JobService(
                settings,
                make_job_backend(settings, serverapp.root_dir, cluster),
                ledger=ledger,
                root_dir=serverapp.root_dir,
                multi_user=multi_user,
            )
        )
        self.settings.update(
            {
                GPU_SETTING: self.gpu_service,
                "cube_jobs": self.job_service,
                "cube_settings": settings,
                "cube_notebooks": self.notebook_service,
                "cube_pipelines": self.pipeline_service,
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
                len(settings.profiles),
                ", ".join(p.name for p in settings.profiles),
            )

    def initialize_handlers(self) -> None:
        self.handlers.extend(INFO_HANDLERS)
        if not self.cube_settings.user_server:
            self.handlers.extend(HANDLERS)
            self.handlers.append((ROUTE_PATTERN, NotebookRouterHandler))
        self.handlers.extend(PIPELINE_HANDLERS)
        self.handlers.extend(GPU_HANDLERS)
        self.handlers.extend(JOB_HANDLERS)
        self.handlers.extend(NOT_SERVED_HANDLERS)

    async def _start_jupyter_server_extension(self, serverapp: ServerApp) -> None:
        if self.backend_starter is not None:
            await self.backend_starter.start()  # retries in the background; 503s until it is up
        else:
            try:
                await self.ledger_servers.start(supervise=False)
            except CubeError as exc:  # GPU quota checks answer 503 saying why; the rest serves on
                self.log.error("cube-jupyter: the owner's notebook servers cannot be read: %s", exc.message)
        await self._start_cluster_runs()
        await self.gpu_service.start()
        try:
            await self.job_service.start()
        except CubeError as exc:  # jobs answer 503 saying why; the rest of the workbench serves on
            self.log.error("cube-jupyter: jobs are off: %s", exc.message)

    async def stop_extension(self) -> None:
        try:
            await self.pipeline_service.close()
        except Exception:  # shutting down must always complete
            self.log.exception("cube-jupyter: stopping pipeline runs failed")
        try:
            await self.gpu_service.close()
        except Exception:  # shutting down must always complete
            self.log.exception("cube-jupyter: stopping GPU sampling failed")
        try:
            await self.job_service.close()
        except Exception:  # shutting down must always complete
            self.log.exception("cube-jupyter: stopping jobs failed")
        if self.backend_starter is not None:
            await self.backend_starter.close()
        else:
            await self.ledger_servers.close()
        if self.kube_cluster is not None:  # last: every feature's informers stop here, once
            try:
                await self.kube_cluster.close()
            except Exception:  # shutting down must always complete
                self.log.exception("cube-jupyter: closing the cluster connection failed")

    async def _start_cluster_runs(self) -> None:
        """Follow Argo Workflows; without Argo the workbench still serves, offering local runs only."""
        cluster = self.pipeline_service.cluster
        if cluster is None:
            return
        try:
            await cluster.start()
        except CubeError as exc:
            self.log.error("cube-jupyter: cluster pipeline runs are off: %s", exc.message)
            self.pipeline_service.cluster = None

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


def _lock_dir(settings: Settings) -> Path | None:
    """Per-user ledger locks shared by the processes of one machine (local backend only)."""
    return settings.state_dir / "locks" if settings.workbench.backend == "local" else None


def _cluster_runs(settings: Settings, cluster: Cluster | None) -> ClusterPipelineRuns | None:
    """Argo runs of pipelines on the shared `cluster` (kubernetes backend); started with the extension."""
    if cluster is None:
        return None
    from cube_jupyter.pipelines.kubernetes.runs import ClusterPipelineRuns

    return ClusterPipelineRuns(settings, cluster)
