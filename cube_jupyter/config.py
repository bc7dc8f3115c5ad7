"""The aggregate config: every feature's Configurable, loaded once at startup into frozen `Settings`.

    c.CubeWorkbench.backend = "kubernetes"
    c.CubeSpawner.profiles = [{"name": "gpu", "image": "...", "gpu": 1, ...}]

`load_settings` is the one loader: it loads every Configurable in `CONFIG_CLASSES` once, each trait
checked by its traitlets `@validate`; any bad value raises `ConfigError` naming the field
(`CubeSpawner.profiles[1].cpu`), so a server never runs with config it silently ignored. Then it
derives what one feature's rules need from another's config (the GPU resource names, the pods'
service accounts, the jobs' namespace) into the workbench-wide part, and freezes everything. Only
the composition root (`cube_jupyter.services`), the CLI and the server extension read this module;
each feature reads its own part (`settings.notebooks`, `settings.jobs`, ...).
"""

from __future__ import annotations

import copy
import os
from dataclasses import dataclass
from pathlib import Path

from traitlets.config import Config, PyFileConfigLoader

from cube_jupyter.configurable import CubeConfigurable
from cube_jupyter.errors import ConfigError, InvalidInput
from cube_jupyter.gpu.config import CubeGPU, GpuSettings
from cube_jupyter.jobs.config import CubeJobs, JobSettings
from cube_jupyter.notebooks.config import CubeSpawner, NotebookSettings, parse_profiles
from cube_jupyter.pipelines.config import CubePipelines, PipelineSettings
from cube_jupyter.queues import CubeQueues
from cube_jupyter.schedules.config import CubeSchedules, ScheduleSettings
from cube_jupyter.storage.config import CubeStorage
from cube_jupyter.workbench import MOVED_TO_WORKBENCH, CubeWorkbench, WorkbenchSettings

# Every Configurable an admin sets, in load order; the extension app lists them for --help-all.
CONFIG_CLASSES: tuple[type[CubeConfigurable], ...] = (
    CubeWorkbench,
    CubeSpawner,
    CubeStorage,
    CubeGPU,
    CubePipelines,
    CubeJobs,
    CubeSchedules,
    CubeQueues,
)


@dataclass(frozen=True, kw_only=True)
class Settings(WorkbenchSettings):
    """Validated admin config, built once at startup (`load_settings`): the workbench-wide part, and
    each feature's settings (which extend it)."""

    notebooks: NotebookSettings
    pipelines: PipelineSettings
    jobs: JobSettings
    gpu: GpuSettings
    schedules: ScheduleSettings
    deprecations: tuple[str, ...] = ()  # what the config set by an old name: logged at startup


def load_settings(config: Config | None = None, *, base_url: str | None = None) -> Settings:
    """The one loader: every Configurable in `CONFIG_CLASSES` from `config`, once, each trait checked
    by its `@validate`; the first bad value is a ConfigError naming the field. `base_url` is the
    central workbench's own (its Lab is where the servers it starts link back to)."""
    config, deprecations = _renamed_traits(config if config is not None else Config())
    try:
        workbench = CubeWorkbench.load(config)
    except ConfigError as exc:
        name = (exc.field or "").partition(".")[2].partition("[")[0]
        if any(f"CubeSpawner.{name} " in warning for warning in deprecations):
            raise ConfigError(f"{exc.message} (given as CubeSpawner.{name})", field=exc.field) from None
        raise
    spawner = CubeSpawner.load(config)
    storage = CubeStorage.load(config)
    gpu = CubeGPU.load(config)
    pipelines = CubePipelines.load(config)
    jobs = CubeJobs.load(config)
    schedules = CubeSchedules.load(config)
    queues = CubeQueues.load(config)
    loaded = (workbench, spawner, storage, gpu, pipelines, jobs, schedules, queues)
    spawner.check()
    profiles = parse_profiles(spawner.profiles)
    try:
        queues.check_profiles(p.name for p in profiles)
    except InvalidInput as exc:
        raise ConfigError(exc.message, field=exc.field) from None
    image = next((p for p in profiles if p.default), profiles[0]).image
    workbench_url = workbench.workbench_url
    if not workbench_url and base_url is not None and workbench.role == "workbench":
        workbench_url = f"{base_url}lab"
    base = WorkbenchSettings(
        workbench=workbench,
        storage=storage,
        queues=queues,
        gpu_resources=tuple(
            sorted({p.gpu_resource for p in profiles} | {jobs.gpu_resource, pipelines.gpu_resource})
        ),
        # Each '' is the namespace's default account, which every namespace has.
        pod_service_accounts=tuple(
            sorted(
                account or "default"
                for account in {
                    spawner.service_account,
                    jobs.service_account,
                    jobs.serving_service_account or jobs.service_account,
                    pipelines.service_account,
                }
            )
        ),
        jobs_namespace_template=jobs.namespace_template,
        workbench_url=workbench_url,
    )
    base.check()
    prometheus_url = gpu.prometheus_url or workbench.prometheus_url  # CubeGPU's wins
    server_config = {
        type(configurable).__name__: {
            name: getattr(configurable, name) for name in configurable.trait_names(config=True)
        }
        for configurable in loaded
    }
    for configurable in loaded:
        configurable.freeze()
    return base.extend(
        Settings,
        notebooks=base.extend(
            NotebookSettings, spawner=spawner, profiles=profiles, server_config=server_config
        ),
        pipelines=base.extend(
            PipelineSettings, workload=pipelines, default_image=pipelines.default_image or image
        ),
        jobs=base.extend(
            JobSettings,
            workload=jobs,
            default_image=jobs.default_image or image,
            prometheus_url=jobs.serving_prometheus_url or prometheus_url,
        ),
        gpu=base.extend(GpuSettings, gpu=gpu, prometheus_url=prometheus_url),
        schedules=base.extend(ScheduleSettings, schedules=schedules),
        deprecations=tuple(deprecations),
    )


def _renamed_traits(config: Config) -> tuple[Config, list[str]]:
    """`config` with the workbench-wide traits it sets by their old `CubeSpawner.*` names moved to
    `CubeWorkbench`, and a warning for each (the new name wins when both are set)."""
    spawner = config.get("CubeSpawner", {})
    old = [name for name in MOVED_TO_WORKBENCH if name in spawner]
    if not old:
        return config, []
    config = copy.deepcopy(config)
    workbench = config["CubeWorkbench"]
    warnings = []
    for name in old:
        value = config["CubeSpawner"].pop(name)
        if name in workbench:
            warnings.append(
                f"CubeSpawner.{name} is deprecated and ignored: CubeWorkbench.{name} is set too; "
                f"remove CubeSpawner.{name}"
            )
            continue
        workbench[name] = value
        warnings.append(
            f"CubeSpawner.{name} is deprecated: it is workbench-wide now; set CubeWorkbench.{name} instead"
        )
    return config, warnings


def load_config_file(path: str | os.PathLike[str]) -> Config:
    """Read a `jupyter_server_config.py`-style file (`c.CubeSpawner.x = ...`) for the CLI."""
    file = Path(path)
    if not file.is_file():
        raise ConfigError(f"config file {str(file)!r} does not exist", field="--config")
    loader = PyFileConfigLoader(file.name, path=str(file.parent.resolve()))
    try:
        return loader.load_config()
    except Exception as exc:  # a config file is user code: any error it raises is a config error
        raise ConfigError(f"config file {str(file)!r} could not be loaded: {exc}", field="--config") from None
