"""The central workbench's config, shipped as the `cube-jupyter-config` ConfigMap and read by Jupyter
first ($JUPYTER_CONFIG_PATH=/etc/cube-jupyter).

Edit it, then `kubectl apply -k deploy/overlays/<overlay>`: the ConfigMap's name carries a hash of its
content, so the Deployment rolls out with the new config by itself. Every `Cube*` setting is checked at
startup; a bad value stops the server with a message naming it (`kubectl logs deploy/cube-jupyter`).
The settings are listed in the README ("Admin configuration") and by `--help-all`.
"""

import glob
import os

from cube_jupyter.images import image

c = get_config()  # noqa: F821 - defined by the traitlets config loader

# -- the server ---------------------------------------------------------------------------------------
c.ServerApp.ip = "0.0.0.0"
c.ServerApp.port = 8888
# Every path of the workbench starts here: the kubeflow overlay's VirtualService routes this prefix,
# and the Deployment's probes ask `{base_url}api`.
c.ServerApp.base_url = "/cube/"
c.ServerApp.open_browser = False
# The image is read-only: extensions come with a new image, not from the UI.
c.LabApp.extension_manager = "readonly"
# Any user may load the Lab page: it must not make the workbench fetch JupyterLab's news feed or
# update check from the internet on their behalf (a cluster often has no egress anyway).
c.LabApp.news_url = None
c.LabApp.check_for_updates_class = "jupyterlab.handlers.announcements.NeverCheckForUpdate"

# -- the workbench ------------------------------------------------------------------------------------
c.CubeWorkbench.backend = "kubernetes"
c.CubeWorkbench.role = "workbench"

# Notebook servers run the images built from images/, tagged with the version of the workbench that
# reads this file (`image(...)`), so upgrading the workbench upgrades them too. Pipeline steps, job
# replicas and trials that name no image get the runtime image the same way (the default).
c.CubeSpawner.profiles = [
    {
        "name": "cpu",
        "display_name": "CPU",
        "description": "2 CPUs, 8 GiB memory",
        "image": image("notebook"),
        "cpu": "2",
        "memory": "8Gi",
        "default": True,
    },
    {
        "name": "gpu",
        "display_name": "One GPU",
        "description": "1 NVIDIA GPU, 8 CPUs, 32 GiB memory",
        "image": image("notebook-gpu"),
        "cpu": "8",
        "memory": "32Gi",
        "gpu": 1,
        "gpu_resource": "nvidia.com/gpu",
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
]
c.CubeSpawner.workspace_size = "10Gi"
c.CubeSpawner.max_servers_per_user = 5
c.CubeWorkbench.gpu_quota_per_user = 2

# Cluster pipeline runs and shipped training code need an S3 store every pod can reach, with its
# credentials in a Secret (keys AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY) in each user namespace, e.g.
#   c.CubeStorage.url = "s3://mlpipeline/cube-jupyter"
#   c.CubeStorage.endpoint = "http://minio-service.kubeflow:9000"
#   c.CubeStorage.credentials_secret = "cube-s3-credentials"
# With CubeWorkbench.create_namespaces the workbench copies that Secret from its own namespace into each
# user namespace; rbac.yaml lets it read only a Secret of this name (another name: change both).

# -- the overlay's settings ---------------------------------------------------------------------------
# Each overlay adds its own `*.py` file to this ConfigMap (kubeflow.py, standalone.py); every `*.py`
# file beside this one is loaded after it, in name order, so an overlay's settings win.
_here = os.path.dirname(os.path.abspath(__file__))
for _path in sorted(glob.glob(os.path.join(_here, "*.py"))):
    if os.path.basename(_path) != os.path.basename(__file__):
        load_subconfig(os.path.basename(_path), path=_here)  # noqa: F821 - from the config loader
