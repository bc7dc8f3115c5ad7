"""`%%cube_train`: run the cell as a distributed training job, shipped with the local modules it imports.

    %%cube_train --framework pytorch --workers 2 [--name N] [--gpus G] [--image I] [--no-wait]
    import torch.distributed as dist
    dist.init_process_group("gloo")
    ...

The cell runs on every replica as a script, with the env the operator sets (RANK, WORLD_SIZE, ...).
The magic returns the job (`_.logs("worker-1")`); a bad option is a UsageError, a refused job (bad
spec, GPU quota) its message, never a traceback.
"""

from __future__ import annotations

from IPython.core.error import UsageError

from cube_jupyter.errors import CubeError
from cube_jupyter.jobs.api import RemoteJob, train_source
from cube_jupyter.jobs.training_spec import FRAMEWORKS
from cube_jupyter.magics import MagicArgumentParser

TRAIN_PARSER = MagicArgumentParser(
    prog="%%cube_train",
    description="Run this cell as a distributed training job (one process or pod per replica).",
)
TRAIN_PARSER.add_argument("--framework", choices=FRAMEWORKS, default="pytorch")
TRAIN_PARSER.add_argument(
    "--workers",
    type=int,
    default=2,
    help="processes training together (default 2): for pytorch and xgboost a Master and N-1 Workers",
)
TRAIN_PARSER.add_argument("--name", help="job name (default: cell-XXXXXX)")
TRAIN_PARSER.add_argument("--gpus", type=int, default=0, help="GPUs per replica")
TRAIN_PARSER.add_argument("--image", help="container image on the cluster (default: the admin's)")
TRAIN_PARSER.add_argument("--no-wait", dest="wait", action="store_false", help="return once submitted")


def cube_train(line: str, cell: str) -> RemoteJob | None:
    args = TRAIN_PARSER.parse_line(line)
    if args is None:
        return None
    if args.workers < 1:
        TRAIN_PARSER.error(f"--workers must be at least 1, got {args.workers}")
    if args.gpus < 0:
        TRAIN_PARSER.error(f"--gpus must be 0 or more, got {args.gpus}")
    try:
        return train_source(
            cell,
            framework=args.framework,
            workers=args.workers,
            name=args.name,
            image=args.image,
            resources={"gpu": args.gpus} if args.gpus else None,
            wait=args.wait,
        )
    except CubeError as bad:
        raise UsageError(bad.message) from None
