"""`cube-jupyter pipeline graph|run|compile`: a tagged notebook as a pipeline, from a shell.

    cube-jupyter pipeline graph NOTEBOOK
    cube-jupyter pipeline run NOTEBOOK [-p NAME VALUE]... [--store URL] [--parallel N] [--no-cache]
                                       [--output-dir DIR]
    cube-jupyter pipeline resume [RUN_ID] [--output-dir DIR]
    cube-jupyter pipeline compile NOTEBOOK --target argo|kfp [-o FILE]

`run` exits 0 when every step succeeded (or was cached), 1 when a step failed, 2 when the pipeline
or an argument is invalid, 130 when cancelled with Ctrl-C (running kernels are killed, the run is
recorded as cancelled, everything finished so far stays in the store and the cache). `resume` runs a
failed, cancelled or interrupted run again from where it stopped (default: the user's newest such
run), with the same exit codes.
"""

from __future__ import annotations

import argparse

from cube_jupyter.cli.command import Command


def add_pipeline_commands(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pipeline = commands.add_parser("pipeline", help="notebooks as pipelines: graph, run, compile")
    actions = pipeline.add_subparsers(title="actions", metavar="ACTION", required=True)

    def action(name: str, help_text: str) -> argparse.ArgumentParser:
        sub = actions.add_parser(name, help=help_text)
        sub.add_argument("notebook", metavar="NOTEBOOK", help="the tagged .ipynb file")
        sub.add_argument("--config", metavar="FILE", help="a jupyter_server_config.py with c.Cube* settings")
        return sub

    graph = action("graph", "print the steps, edges and the variables on each edge as JSON")
    graph.set_defaults(run=Command("cube_jupyter.cli.pipeline_commands:graph"))

    run = action("run", "run the pipeline here: steps in parallel worker processes, cached by content")
    parameter_option(run)
    run.add_argument("--store", metavar="URL", help="artifact store: a path, file:// or s3://bucket/prefix")
    run.add_argument(
        "--parallel",
        type=int,
        metavar="N",
        help="steps at once (default: the core count, at most CubePipelines.max_parallel_per_run)",
    )
    run.add_argument("--no-cache", action="store_true", help="run every step even if it is unchanged")
    run.add_argument("--output-dir", metavar="DIR", help="write executed step notebooks to DIR/STEP.ipynb")
    run.add_argument("--user", help="whose run it is in the history (default: CubeWorkbench.default_user)")
    run.add_argument(
        "--target",
        choices=["local", "cluster", "kfp"],
        default="local",
        help="where steps run: worker processes here, an Argo Workflow or a Kubeflow Pipelines run "
        "(kubernetes backend; kfp as CubePipelines.cluster_target allows)",
    )
    run.set_defaults(run=Command("cube_jupyter.cli.pipeline_commands:run"))

    resume = actions.add_parser(
        "resume", help="run a failed, cancelled or interrupted run on from where it stopped"
    )
    resume.add_argument(
        "run_id", nargs="?", metavar="RUN_ID", help="the run (default: your newest resumable one)"
    )
    resume.add_argument("--output-dir", metavar="DIR", help="write executed step notebooks to DIR/STEP.ipynb")
    resume.add_argument("--user", help="whose run it is (default: CubeWorkbench.default_user)")
    resume.add_argument("--config", metavar="FILE", help="a jupyter_server_config.py with c.Cube* settings")
    resume.set_defaults(run=Command("cube_jupyter.cli.pipeline_commands:resume"))

    compile_ = action("compile", "print the pipeline as an Argo Workflow or Kubeflow Pipelines v2 IR (YAML)")
    compile_.add_argument(
        "--target",
        choices=["argo", "kfp"],
        required=True,
        help="what to compile to: an Argo Workflow, or KFP IR (PipelineSpec) built by KFP's compiler",
    )
    compile_.add_argument("-o", "--output", metavar="FILE", help="write to FILE instead of stdout")
    compile_.add_argument(
        "--store", metavar="URL", help="argo: s3://bucket/prefix (default: CubeStorage.url)"
    )
    compile_.add_argument(
        "--run-id", help="argo: name the run's artifacts (default: the Workflow's own name)"
    )
    parameter_option(compile_)
    compile_.set_defaults(run=Command("cube_jupyter.cli.pipeline_commands:compile_pipeline"))


def parameter_option(parser: argparse.ArgumentParser) -> None:
    """`-p NAME VALUE`, repeatable: a value for the notebook's parameters cell (papermill's flag)."""
    parser.add_argument(
        "-p",
        "--parameter",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "VALUE"),
        help="set a parameter of the notebook's parameters cell; VALUE is JSON (0.1, true, [1, 2]) or text",
    )
